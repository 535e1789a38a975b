use agentfly_core::tool;

struct Sandbox;

/// Runs code, but forgot the environment parameter.
#[tool(env = Sandbox)]
fn run(code: String) -> String {
    code
}

/// Takes an environment without saying which.
#[tool]
fn peek(sandbox: &mut Sandbox) -> String {
    let _ = sandbox;
    String::new()
}

/// The environment must come first.
#[tool(env = Sandbox)]
fn late(code: String, sandbox: &mut Sandbox) -> String {
    let _ = sandbox;
    code
}

fn main() {}
