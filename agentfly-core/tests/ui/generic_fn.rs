use agentfly_core::tool;

/// Echoes a value.
#[tool]
fn echo<T: ToString>(value: T) -> String {
    value.to_string()
}

/// Echoes anything.
#[tool]
fn echo_impl(value: impl ToString) -> String {
    value.to_string()
}

fn main() {}
