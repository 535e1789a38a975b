//! Generation throughput of SmolLM2-135M in f32: prefill of 256 tokens, and batched
//! decode at batch 1, 8 and 32 with 128 new tokens, against Hugging Face transformers
//! (PyTorch on CPU) on the same weights and settings in the same run. Decode runs as the
//! engine runs it, with the weights packed once (`EngineConfig::packed_decode`), and again
//! with flex's own products (the last column). Where the CPU has Intel AMX a second table
//! gives the same measurements with bf16 products (`--bf16`: the serving copy packed in bf16
//! for AMX) against transformers in bf16 (PyTorch's CPU bf16, through oneDNN, which uses
//! AMX too) and in f32.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-trainer --bench generation
//! ```
//!
//! Each agentfly figure is also given as a share of the machine's ceiling for this model:
//! `2 × parameters` FLOP per token at the matrix-multiply rate measured in the same run
//! (a `[512, 576] × [576, 1536]` product, the shape of the model's projections, on the
//! same device).
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

    eprintln!("measuring the matrix-multiply rate ...");
    let rate = common::matmul_flops(&device, runs);
    let params = parameter_count(&model);
    let ceiling = rate / (2.0 * params);
    eprintln!("measuring agentfly ({device_name}) ...");
    let prefill_ids = random_ids(PREFILL);
    let ids = Tensor::<2, Int>::from_data(
        TensorData::new(
            prefill_ids.iter().map(|&t| t as i64).collect::<Vec<_>>(),
            [1, PREFILL],
        ),
        &device,
    );
    prefill_last(&model, &ids);
    let ours_prefill = PREFILL as f64 / best_of(runs, || prefill_last(&model, &ids));
    // Decode as the engine runs it (weights packed once, `EngineConfig::packed_decode`),
    // and with flex's own products for comparison.
    let mut packed = Pretrained::load(&gguf, &device).expect("load SmolLM2");
    packed.decoder.pack_for_decode();
    let prompts: Vec<Vec<Vec<u32>>> = BATCHES
        .iter()
        .map(|&batch| (0..batch).map(|_| random_ids(PROMPT)).collect())
        .collect();
    let ours_decode = decode_rates(&packed, &prompts, runs);
    eprintln!("measuring agentfly's decode with flex's products ...");
    let unpacked_decode = decode_rates(&model, &prompts, runs);

    // bf16 products on AMX, as `--bf16` serves: every product on the packed bf16 weights.
    let bf16 = agentfly_trainer::model::amx::available().then(|| {
        eprintln!("measuring agentfly with bf16 products (AMX) ...");
        let mut model = Pretrained::load(&gguf, &device).expect("load SmolLM2");
        assert!(model.decoder.use_bf16_products(true), "bf16 on the CPU");
        model.decoder.pack_for_decode();
        let prefill = PREFILL as f64 / best_of(runs, || prefill_last(&model, &ids));
        (prefill, decode_rates(&model, &prompts, runs))
    });

    let peer_args = |dtype: &str| {
        [
            "--model",
            &hf_dir.to_string_lossy(),
            "--runs",
            &runs.to_string(),
            "--prefill",
            &PREFILL.to_string(),
            "--prompt-len",
            &PROMPT.to_string(),
            "--new-tokens",
            &NEW.to_string(),
            "--dtype",
            dtype,
        ]
        .map(String::from)
    };
    let peer = common::run_peer("transformers_generate.py", &peer_args("float32"));
    println!(
        "\nSmolLM2-135M-Instruct, f32, {} CPU threads available\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| measurement | agentfly (burn {device_name}) tok/s | share of ceiling | transformers (torch CPU) tok/s | ratio | agentfly, flex's products (not packed) tok/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let row = |name: String, ours: f64, theirs: Option<f64>, unpacked: Option<f64>| {
        let share = 100.0 * ours / ceiling;
        let unpacked = unpacked.map_or("same".into(), |u| format!("{u:.1}"));
        match theirs {
            Some(t) => println!(
                "| {name} | {ours:.1} | {share:.0}% | {t:.1} | {:.2}× | {unpacked} |",
                ours / t
            ),
            None => println!("| {name} | {ours:.1} | {share:.0}% | n/a | n/a | {unpacked} |"),
        }
    };
    row(
        format!("prefill {PREFILL} tokens, batch 1"),
        ours_prefill,
        peer.as_ref()
            .and_then(|p| p["prefill_tokens_per_s"].as_f64()),
        None,
    );
    for ((batch, ours), unpacked) in BATCHES.iter().zip(ours_decode).zip(unpacked_decode) {
        let theirs = peer
            .as_ref()
            .and_then(|p| p["decode_tokens_per_s"][batch.to_string()].as_f64());
        row(
            format!("decode {NEW} new tokens, batch {batch}"),
            ours,
            theirs,
            Some(unpacked),
        );
    }
    println!(
        "\nceiling: {:.1} GFLOP/s matrix multiply × 1 / (2 × {:.1} M parameters) = {ceiling:.0} tok/s",
        rate / 1e9,
        params / 1e6
    );
    if let Some(p) = &peer {
        println!("peer: torch {} with {} threads", p["torch"], p["threads"]);
    }
    match bf16 {
        Some((prefill, decode)) => {
            let peer_bf16 = common::run_peer("transformers_generate.py", &peer_args("bfloat16"));
            bf16_table(prefill, &decode, peer_bf16.as_ref(), peer.as_ref());
        }
        None => println!("\nbf16: this CPU or OS has no AMX; not measured"),
    }
}

/// One forward pass over the prefill's ids, the last position's logits read back.
fn prefill_last(model: &Pretrained, ids: &Tensor<2, Int>) {
    let logits = model.decoder.forward(ids.clone(), &model.rope);
    let _ = logits.narrow(1, PREFILL - 1, 1).into_data();
}

/// The bf16 measurements against transformers in bf16 and in f32.
fn bf16_table(
    prefill: f64,
    decode: &[f64],
    peer_bf16: Option<&serde_json::Value>,
    peer_f32: Option<&serde_json::Value>,
) {
    println!("\nbf16 products on AMX (`--bf16`), against transformers in bf16 and in f32\n");
    println!(
        "| measurement | agentfly bf16 tok/s | transformers bf16 tok/s | ratio | transformers f32 tok/s | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let cell = |ours: f64,
                peer: Option<&serde_json::Value>,
                key: &dyn Fn(&serde_json::Value) -> Option<f64>| {
        match peer.and_then(key) {
            Some(t) => format!("{t:.1} | {:.2}×", ours / t),
            None => "n/a | n/a".into(),
        }
    };
    let prefill_key = |p: &serde_json::Value| p["prefill_tokens_per_s"].as_f64();
    println!(
        "| prefill {PREFILL} tokens, batch 1 | {prefill:.1} | {} | {} |",
        cell(prefill, peer_bf16, &prefill_key),
        cell(prefill, peer_f32, &prefill_key)
    );
    for (batch, &ours) in BATCHES.iter().zip(decode) {
        let key = |p: &serde_json::Value| p["decode_tokens_per_s"][batch.to_string()].as_f64();
        println!(
            "| decode {NEW} new tokens, batch {batch} | {ours:.1} | {} | {} |",
            cell(ours, peer_bf16, &key),
            cell(ours, peer_f32, &key)
        );
    }
}

/// Decode tokens/s of `model` for each batch of `prompts`: `NEW - 1` tokens per row over
/// the time of `NEW` minus that of one (the prefill and first token).
fn decode_rates(model: &Pretrained, prompts: &[Vec<Vec<u32>>], runs: usize) -> Vec<f64> {
    prompts
        .iter()
        .map(|batch| {
            let run = |n: usize| {
                let params = SamplingParams {
                    ignore_eos: true,
                    ..SamplingParams::greedy(n)
                };
                generate(model, batch, &params, None).expect("prompts fit the context");
            };
            run(2);
            let t1 = best_of(runs, || run(1));
            let tn = best_of(runs, || run(NEW));
            (batch.len() * (NEW - 1)) as f64 / (tn - t1)
        })
        .collect()
}

/// The model's parameters (the tied output projection counted once).
fn parameter_count(model: &Pretrained) -> f64 {
    use burn::module::Module;
    model.decoder.num_params() as f64
}
