use agentfly_core::tool;

/// Prints a lot.
#[tool(max_output_chars = "lots")]
fn lots() {}

/// Ends it.
#[tool(terminal = true)]
fn end() {}

/// Twice.
#[tool(timeout_ms = 10, timeout_ms = 20)]
fn twice() {}

/// Zero.
#[tool(timeout_ms = 0)]
fn zero() {}

/// Bad name.
#[tool(name = "has space")]
fn spaced() {}

fn main() {}
