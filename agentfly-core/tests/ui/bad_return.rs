use agentfly_core::tool;

/// Returns bytes.
#[tool]
fn bytes() -> Vec<u8> {
    vec![1, 2, 3]
}

/// Returns a result of bytes.
#[tool]
fn maybe_bytes() -> Result<Vec<u8>, String> {
    Ok(vec![1, 2, 3])
}

/// Returns a result whose error cannot be shown.
#[tool]
fn opaque_error() -> Result<String, Vec<u8>> {
    Ok(String::new())
}

fn main() {}
