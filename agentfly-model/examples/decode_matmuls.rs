//! What one decode step's matrix products cost at SmolLM2-135M's shapes, on the CPU
//! backend: the tied LM head as the decoder computes it (`embed @ hidden^T`, transposed
//! back), in f32 and f16, and one layer's projections (fused q/k/v, fused gate/up, o, down)
//! in f32, for 1, 8 and 32 rows. BENCHMARKS.md compares them with a whole decode step.
//!
//! `cargo run --release -p agentfly-model --example decode_matmuls`

use burn::tensor::{DType, Device, Distribution, Tensor};
use std::time::Instant;

/// Mean seconds of `f` over `reps` calls, after one call to warm up.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    for _ in 0..reps {
        f();
    }
    start.elapsed().as_secs_f64() / reps as f64
}

fn random(shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn main() {
    let device = agentfly_model::device::parse_device("cpu").expect("the CPU device");
    let (hidden, vocab, layers) = (576, 49152, 30);
    println!(
        "| rows | LM head f32 ms | LM head f16 ms | one layer's projections f32 ms | × {layers} layers + LM head f32 ms |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for rows in [1usize, 8, 32] {
        let head = |dtype: DType| {
            let embed = random([vocab, hidden], &device).cast(dtype);
            let x = random([rows, hidden], &device).cast(dtype);
            time(10, || {
                let _ = embed
                    .clone()
                    .matmul(x.clone().transpose())
                    .transpose()
                    .cast(DType::F32)
                    .into_data();
            })
        };
        let (f32_head, f16_head) = (head(DType::F32), head(DType::F16));
        // q/k/v fused (576 + 2 × 192), gate/up fused (2 × 1536), o, down.
        let layer: f64 = [
            (hidden, 960),
            (hidden, 3072),
            (hidden, hidden),
            (1536, hidden),
        ]
        .into_iter()
        .map(|(k, n)| {
            let w = random([k, n], &device);
            let x = random([rows, k], &device);
            time(50, || {
                let _ = x.clone().matmul(w.clone()).into_data();
            })
        })
        .sum();
        println!(
            "| {rows} | {:.2} | {:.2} | {:.3} | {:.1} |",
            f32_head * 1e3,
            f16_head * 1e3,
            layer * 1e3,
            (layer * layers as f64 + f32_head) * 1e3
        );
    }
}
