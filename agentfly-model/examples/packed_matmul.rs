//! Whether weights packed once for the kernel beat flex's matrix products at decode's shapes:
//! `x · W` for 1, 8 and 32 rows over all of SmolLM2-135M's projections (30 layers' own
//! weights, so they stream from memory as in a real decode step, and the tied LM head),
//! with flex (gemm, which packs the weight on every call) and with `model::PackedWeight`
//! (packed into 32-column panels beforehand, as the engine does), and, where the CPU has
//! AMX, packed in bf16 for AMX's tiles (as the engine does with `--bf16`), and with
//! `model::matmul` (the gemm crate's product over all rows, written into the tensor, as
//! prefill and training run). Prints milliseconds per decode step's products and the
//! largest difference from flex's results.
//!
//! `cargo run --release -p agentfly-model --example packed_matmul`

use agentfly_model::model::PackedWeight;
use agentfly_model::model::matmul::matmul;
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use std::time::Instant;

fn values(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn main() {
    let device = Device::flex();
    let (hidden, inter, vocab, layers) = (576usize, 1536usize, 49152usize, 30usize);
    let mut shapes = Vec::new();
    for _ in 0..layers {
        shapes.extend([
            (hidden, 960),
            (hidden, 2 * inter),
            (hidden, hidden),
            (inter, hidden),
        ]);
    }
    shapes.push((hidden, vocab));
    let weights: Vec<Tensor<2>> = shapes
        .iter()
        .map(|&(k, n)| Tensor::<2>::random([k, n], Distribution::Normal(0.0, 0.05), &device))
        .collect();
    let packed: Vec<PackedWeight> = weights
        .iter()
        .zip(&shapes)
        .map(|(w, &(k, n))| PackedWeight::from_in_out(&values(w.clone()), k, n))
        .collect();
    let bf16: Option<Vec<PackedWeight>> = weights
        .iter()
        .zip(&shapes)
        .map(|(w, &(k, n))| PackedWeight::bf16_from_in_out(&values(w.clone()), k, n))
        .collect();
    println!(
        "| rows | flex ms/step | model::matmul ms/step | packed ms/step | ratio | max abs diff | packed bf16 (AMX) ms/step | ratio to flex | max abs diff |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for rows in [1usize, 8, 16, 32, 48, 64] {
        let inputs: Vec<Tensor<2>> = shapes
            .iter()
            .map(|&(k, _)| Tensor::<2>::random([rows, k], Distribution::Normal(0.0, 1.0), &device))
            .collect();
        let host: Vec<Vec<f32>> = inputs.iter().map(|x| values(x.clone())).collect();
        let reps = 5;
        let mut flex_out = Vec::new();
        let mut flex_best = f64::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            flex_out = inputs
                .iter()
                .zip(&weights)
                .map(|(x, w)| values(x.clone().matmul(w.clone())))
                .collect();
            flex_best = flex_best.min(start.elapsed().as_secs_f64());
        }
        let mut gemm_best = f64::MAX;
        for _ in 0..reps {
            let start = Instant::now();
            for (x, w) in inputs.iter().zip(&weights) {
                let _ = values(matmul(x.clone(), w.clone(), false));
            }
            gemm_best = gemm_best.min(start.elapsed().as_secs_f64());
        }
        let run = |packed: &[PackedWeight]| {
            let mut best = f64::MAX;
            let mut ours: Vec<Vec<f32>> = Vec::new();
            for _ in 0..reps {
                let start = Instant::now();
                ours.clear();
                for (x, p) in host.iter().zip(packed) {
                    // As the model does: the input from a tensor, the result back into one.
                    let t =
                        Tensor::<2>::from_data(TensorData::new(x.clone(), [rows, p.k()]), &device);
                    let out = p.matmul(&values(t), rows);
                    let _ = Tensor::<2>::from_data(
                        TensorData::new(out.clone(), [rows, p.n()]),
                        &device,
                    );
                    ours.push(out);
                }
                best = best.min(start.elapsed().as_secs_f64());
            }
            let diff = flex_out
                .iter()
                .flatten()
                .zip(ours.iter().flatten())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            (best, diff)
        };
        let (packed_best, diff) = run(&packed);
        let bf16_cells = match &bf16 {
            Some(b) => {
                let (best, diff) = run(b);
                format!("{:.1} | {:.2}× | {diff:.1e}", best * 1e3, flex_best / best)
            }
            None => "n/a (no AMX) | | ".into(),
        };
        println!(
            "| {rows} | {:.1} | {:.1} | {:.1} | {:.2}× | {diff:.1e} | {bf16_cells} |",
            flex_best * 1e3,
            gemm_best * 1e3,
            packed_best * 1e3,
            flex_best / packed_best
        );
    }
}
