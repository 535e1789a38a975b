//! Generation throughput of SmolLM2-135M in f32: prefill of 256 tokens, and batched
//! decode at batch 1, 8 and 32 with 128 new tokens, against Hugging Face transformers
//! (PyTorch on CPU) on the same weights and settings in the same run.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-trainer --bench generation
//! ```
//!
//! Environment: `AGENTFLY_PYTHON` (default `.venv-bench/bin/python`), `AGENTFLY_DEVICE`
//! (default `cpu`), `AGENTFLY_BENCH_RUNS` (default 3; the best run counts).

use agentfly_trainer::Pretrained;
use agentfly_trainer::device::parse_device;
use agentfly_trainer::generate::{SamplingParams, generate};
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use std::time::Instant;

mod common;

const PREFILL: usize = 256;
const PROMPT: usize = 64;
const NEW: usize = 128;
const BATCHES: [usize; 3] = [1, 8, 32];

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    agentfly_trainer::alloc::retain_freed_memory();
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests.
    }
    let gguf = common::smollm2_gguf();
    let device_name = std::env::var("AGENTFLY_DEVICE").unwrap_or_else(|_| "cpu".into());
    let device = parse_device(&device_name).expect("device");
    let runs: usize = std::env::var("AGENTFLY_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let model = Pretrained::load(&gguf, &device).expect("load SmolLM2");
    // The peer loads the very same f32 weights, saved by us in Hugging Face layout.
    let hf_dir = common::smollm2_hf_dir();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let vocab = model.config.vocab_size as u32;
    let mut random_ids =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(100..vocab)).collect() };

    eprintln!("measuring agentfly ({device_name}) ...");
    let prefill_ids = random_ids(PREFILL);
    let ids = Tensor::<2, Int>::from_data(
        TensorData::new(
            prefill_ids.iter().map(|&t| t as i64).collect::<Vec<_>>(),
            [1, PREFILL],
        ),
        &device,
    );
    let forward = || {
        let logits = model.decoder.forward(ids.clone(), &model.rope);
        let _ = logits.narrow(1, PREFILL - 1, 1).into_data();
    };
    forward();
    let ours_prefill = PREFILL as f64 / best_of(runs, forward);
    let mut ours_decode = Vec::new();
    for batch in BATCHES {
        let prompts: Vec<Vec<u32>> = (0..batch).map(|_| random_ids(PROMPT)).collect();
        let run = |n: usize| {
            let params = SamplingParams {
                ignore_eos: true,
                ..SamplingParams::greedy(n)
            };
            generate(&model, &prompts, &params, None).expect("prompts fit the context");
        };
        run(2);
        let t1 = best_of(runs, || run(1));
        let tn = best_of(runs, || run(NEW));
        ours_decode.push((batch * (NEW - 1)) as f64 / (tn - t1));
    }

    let peer = common::run_peer(
        "transformers_generate.py",
        &[
            "--model".into(),
            hf_dir.to_string_lossy().into_owned(),
            "--runs".into(),
            runs.to_string(),
            "--prefill".into(),
            PREFILL.to_string(),
            "--prompt-len".into(),
            PROMPT.to_string(),
            "--new-tokens".into(),
            NEW.to_string(),
        ],
    );
    println!(
        "\nSmolLM2-135M-Instruct, f32, {} CPU threads available\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| measurement | agentfly (burn {device_name}) tok/s | transformers (torch CPU) tok/s | ratio |"
    );
    println!("|---|---:|---:|---:|");
    let row = |name: String, ours: f64, theirs: Option<f64>| match theirs {
        Some(t) => println!("| {name} | {ours:.1} | {t:.1} | {:.2}× |", ours / t),
        None => println!("| {name} | {ours:.1} | n/a | n/a |"),
    };
    row(
        format!("prefill {PREFILL} tokens, batch 1"),
        ours_prefill,
        peer.as_ref()
            .and_then(|p| p["prefill_tokens_per_s"].as_f64()),
    );
    for (batch, ours) in BATCHES.iter().zip(ours_decode) {
        let theirs = peer
            .as_ref()
            .and_then(|p| p["decode_tokens_per_s"][batch.to_string()].as_f64());
        row(
            format!("decode {NEW} new tokens, batch {batch}"),
            ours,
            theirs,
        );
    }
    if let Some(p) = &peer {
        println!("\npeer: torch {} with {} threads", p["torch"], p["threads"]);
    }
}
