use agentfly_core::tool;

/// Waits.
#[tool(timeout = 5)]
fn wait() {}

fn main() {}
