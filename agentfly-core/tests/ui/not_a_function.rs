use agentfly_core::tool;

/// Not a function.
#[tool]
struct Thing;

fn main() {}
