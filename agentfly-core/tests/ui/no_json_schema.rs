use agentfly_core::tool;

#[derive(serde::Deserialize)]
struct Point {
    x: f64,
    y: f64,
}

/// Distance from the origin.
#[tool]
fn norm(
    /// The point.
    p: Point,
) -> f64 {
    (p.x * p.x + p.y * p.y).sqrt()
}

fn main() {}
