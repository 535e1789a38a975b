use agentfly_core::tool;

/// A sandbox that forgot to implement `Env`.
#[derive(Default)]
struct Sandbox {
    runs: usize,
}

/// Runs code in the chain's sandbox.
#[tool(env = Sandbox)]
async fn run(sandbox: &mut Sandbox, code: String) -> String {
    sandbox.runs += 1;
    code
}

fn main() {}
