use agentfly_core::tool;

struct Calculator;

impl Calculator {
    /// Adds.
    #[tool]
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
}

fn main() {}
