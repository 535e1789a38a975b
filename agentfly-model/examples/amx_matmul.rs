//! Matrix products at a training step's shapes (SmolLM2-135M, 4 096 tokens): flex's f32
//! products (gemm) against `model::amx`'s bf16 ones on Intel AMX. The forward product
//! `X · W` and the backward pass's `dY · Wᵀ` and `Xᵀ · dY` for the MLP's up and down
//! projections and the attention's query projection. Prints GFLOP/s (best of 5) and the
//! largest error of the bf16 result relative to the f32 one's scale, beside PyTorch's f32
//! and bf16 products at the same shapes (`scripts/bench/torch_matmul.py`, run once first;
//! its bf16 products go through oneDNN, which uses AMX too), when `.venv-bench` is there.
//!
//! `cargo run --release -p agentfly-model --example amx_matmul [-- TOKENS]`

use agentfly_model::model::amx::{self, View};
use burn::tensor::{Device, Distribution, Tensor};
use std::collections::HashMap;
use std::time::Instant;

/// A product: its label, flex's version, A's and B's views, m, k, n.
type Case<'a> = (
    String,
    Box<dyn Fn() -> Tensor<2>>,
    View<'a>,
    View<'a>,
    usize,
    usize,
    usize,
);

fn values(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let tokens: usize = std::env::args()
        .nth(1)
        .map_or(4096, |a| a.parse().expect("TOKENS"));
    if !amx::available() {
        println!("this CPU or OS has no AMX: nothing to compare");
        return;
    }
    let device = Device::flex();
    let peer = torch_peer(tokens);
    println!("threads: {}", rayon::current_num_threads());
    println!(
        "| product | m × k × n | flex f32 GFLOP/s | AMX bf16 GFLOP/s | ratio | max error / scale | PyTorch f32 GFLOP/s | PyTorch bf16 GFLOP/s | AMX bf16 / PyTorch bf16 |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, k_in, n_out) in [
        ("up+gate", 576, 3072),
        ("down", 1536, 576),
        ("query", 576, 576),
    ] {
        let x = Tensor::<2>::random([tokens, k_in], Distribution::Normal(0.0, 1.0), &device);
        let w = Tensor::<2>::random([k_in, n_out], Distribution::Normal(0.0, 0.05), &device);
        let dy = Tensor::<2>::random([tokens, n_out], Distribution::Normal(0.0, 1.0), &device);
        let (xh, wh, dyh) = (values(x.clone()), values(w.clone()), values(dy.clone()));
        let cases: Vec<Case<'_>> = vec![
            (
                format!("{name}: X · W"),
                Box::new({
                    let (x, w) = (x.clone(), w.clone());
                    move || x.clone().matmul(w.clone())
                }),
                View::row_major(&xh, k_in),
                View::row_major(&wh, n_out),
                tokens,
                k_in,
                n_out,
            ),
            (
                format!("{name}: dY · Wᵀ"),
                Box::new({
                    let (dy, w) = (dy.clone(), w.clone());
                    move || dy.clone().matmul(w.clone().transpose())
                }),
                View::row_major(&dyh, n_out),
                View::row_major(&wh, n_out).t(),
                tokens,
                n_out,
                k_in,
            ),
            (
                format!("{name}: Xᵀ · dY"),
                Box::new({
                    let (x, dy) = (x.clone(), dy.clone());
                    move || x.clone().transpose().matmul(dy.clone())
                }),
                View::row_major(&xh, k_in).t(),
                View::row_major(&dyh, n_out),
                k_in,
                tokens,
                n_out,
            ),
        ];
        for (label, flex, a, b, m, k, n) in cases {
            let flops = 2.0 * (m * k * n) as f64;
            let mut reference = Vec::new();
            let flex_s = best(5, || reference = values(flex()));
            let mut c = vec![0f32; m * n];
            let amx_s = best(5, || amx::matmul(a, b, m, k, n, &mut c));
            let scale = reference.iter().fold(0f32, |s, v| s.max(v.abs()));
            let err = c
                .iter()
                .zip(&reference)
                .fold(0f32, |e, (a, b)| e.max((a - b).abs()));
            let amx_rate = flops / amx_s / 1e9;
            let (torch_f32, torch_bf16, versus) = match peer.get(&label) {
                Some(p) => (
                    format!("{:.0}", p.f32),
                    format!("{:.0}", p.bf16),
                    format!("{:.2}×", amx_rate / p.bf16),
                ),
                None => ("–".into(), "–".into(), "–".into()),
            };
            println!(
                "| {label} | {m} × {k} × {n} | {:.0} | {amx_rate:.0} | {:.1}× | {:.1e} | {torch_f32} | {torch_bf16} | {versus} |",
                flops / flex_s / 1e9,
                flex_s / amx_s,
                err / scale
            );
        }
    }
}

/// PyTorch's rates for one product, GFLOP/s.
#[derive(serde::Deserialize)]
struct PeerRates {
    f32: f64,
    bf16: f64,
}

/// PyTorch's products at the same shapes, by label; empty (and said) without `.venv-bench`.
fn torch_peer(tokens: usize) -> HashMap<String, PeerRates> {
    let Some(python) = agentfly_testdata::python_if_present() else {
        eprintln!("no .venv-bench (scripts/setup makes it): PyTorch's columns stay empty");
        return HashMap::new();
    };
    let script = agentfly_testdata::repo().join("scripts/bench/torch_matmul.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--tokens", &tokens.to_string()])
        .output()
        .expect("running the PyTorch peer");
    assert!(
        out.status.success(),
        "the PyTorch peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the peer prints one JSON object")
}
