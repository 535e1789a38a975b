use agentfly_core::tool;

#[tool]
fn add(a: f64, b: f64) -> f64 {
    a + b
}

fn main() {}
