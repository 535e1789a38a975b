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
//! cargo bench -p agentfly-engine --bench generation
//! ```
//!
//! Each agentfly figure is also given as a share of the machine's ceiling for this model:
//! `2 × parameters` FLOP per token at the matrix-multiply rate measured in the same run
//! (a `[512, 576] × [576, 1536]` product, the shape of the model's projections, on the
//! same device).
//!
//! Environment: `AGENTFLY_PYTHON` (default `.venv-bench/bin/python`), `AGENTFLY_DEVICE`
//! (default `cpu`), `AGENTFLY_BENCH_RUNS` (default 3; the best run counts).

use agentfly_engine::generate::{SamplingParams, generate};
use agentfly_model::Pretrained;
use agentfly_model::device::parse_device;
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use std::time::Instant;

use agentfly_testdata::bench as common;

// As in the `agentfly` binary: freed memory is kept for the next step
// (agentfly_model::alloc); `main` calls `retain_freed_memory` first.
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

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
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test --benches` asks benches to list their tests.
    }
    agentfly_model::alloc::retain_freed_memory();
    if let Some(i) = args.iter().position(|a| a == "--row") {
        println!("{}", measure_row(&args[i + 1]));
        return;
    }
    let device_name = std::env::var("AGENTFLY_DEVICE").unwrap_or_else(|_| "cpu".into());
    let device = parse_device(&device_name).expect("device");
    let runs = runs();
    // The peer loads the very same f32 weights, saved by us in Hugging Face layout.
    let hf_dir = common::smollm2_hf_dir();

    eprintln!("measuring the matrix-multiply rate ...");
    let rate = common::matmul_flops(&device, runs);
    let params = {
        use burn::module::Module;
        let model = Pretrained::load(common::smollm2_gguf(), &device).expect("load SmolLM2");
        model.decoder.num_params() as f64
    };
    let ceiling = rate / (2.0 * params);
    // Each row in a process of its own, so that its peak resident memory is its own.
    let row = |name: String| {
        eprintln!("measuring agentfly ({device_name}): {name} ...");
        Measured::of(&common::run_child(&["--row", &name]))
    };
    let ours_prefill = row("prefill".into());
    // Decode as the engine runs it (weights packed once, `EngineConfig::packed_decode`),
    // and with flex's own products for comparison.
    let ours_decode: Vec<Measured> = BATCHES.iter().map(|b| row(format!("decode:{b}"))).collect();
    let unpacked_decode: Vec<Measured> = BATCHES.iter().map(|b| row(format!("flex:{b}"))).collect();
    // bf16 products on AMX, as `--bf16` serves: every product on the packed bf16 weights.
    let bf16 = agentfly_model::model::amx::available().then(|| {
        let prefill = row("bf16-prefill".into());
        let decode: Vec<Measured> = BATCHES.iter().map(|b| row(format!("bf16:{b}"))).collect();
        (prefill, decode)
    });

    // The peer, one process a row too.
    let peer_row = |dtype: &str, batch: Option<usize>| {
        let mut args = [
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
        .to_vec();
        match batch {
            None => args.extend(["--batches".into(), String::new()]),
            Some(b) => args.extend(["--batches".into(), b.to_string(), "--skip-prefill".into()]),
        }
        common::run_peer("transformers_generate.py", &args).map(|p| {
            let tok_s = match batch {
                None => p["prefill_tokens_per_s"].as_f64(),
                Some(b) => p["decode_tokens_per_s"][b.to_string()].as_f64(),
            };
            (tok_s.unwrap_or(f64::NAN), p)
        })
    };
    // The rows, and the peer's versions.
    let peer_rows = |dtype: &str| -> (Vec<Option<Measured>>, Option<serde_json::Value>) {
        let mut about = None;
        let rows = std::iter::once(None)
            .chain(BATCHES.iter().map(|&b| Some(b)))
            .map(|batch| {
                peer_row(dtype, batch).map(|(tok_s, p)| {
                    let peak_bytes = p["peak_bytes"].as_f64().unwrap_or(f64::NAN);
                    about = Some(p);
                    Measured { tok_s, peak_bytes }
                })
            })
            .collect();
        (rows, about)
    };
    let (peer, about) = peer_rows("float32");
    println!(
        "\nSmolLM2-135M-Instruct, f32, {} CPU threads available\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| measurement | agentfly (burn {device_name}) tok/s | share of ceiling | transformers (torch CPU) tok/s | ratio | agentfly, flex's products (not packed) tok/s | agentfly peak GB | transformers peak GB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let names = row_names();
    let ours = std::iter::once(&ours_prefill).chain(&ours_decode);
    let unpacked = std::iter::once(None).chain(unpacked_decode.iter().map(Some));
    for (((name, ours), theirs), unpacked) in names.iter().zip(ours).zip(&peer).zip(unpacked) {
        let share = 100.0 * ours.tok_s / ceiling;
        let unpacked = unpacked.map_or("same".into(), |u| format!("{:.1}", u.tok_s));
        println!(
            "| {name} | {:.1} | {share:.0}% | {} | {unpacked} | {:.1} | {} |",
            ours.tok_s,
            against(ours, theirs.as_ref()),
            ours.peak_bytes / 1e9,
            theirs
                .as_ref()
                .map_or("n/a".into(), |t| format!("{:.1}", t.peak_bytes / 1e9)),
        );
    }
    println!(
        "\nceiling: {:.1} GFLOP/s matrix multiply × 1 / (2 × {:.1} M parameters) = {ceiling:.0} tok/s",
        rate / 1e9,
        params / 1e6
    );
    println!(
        "peak GB: each row's process's peak resident memory (agentfly: Linux VmHWM; the peer: \
         ru_maxrss), the model loaded and the row run {runs} times and more"
    );
    if let Some(p) = about {
        println!("peer: torch {} with {} threads", p["torch"], p["threads"]);
    }
    match bf16 {
        Some((prefill, decode)) => {
            let (peer_bf16, _) = peer_rows("bfloat16");
            bf16_table(&prefill, &decode, &peer_bf16, &peer);
        }
        None => println!("\nbf16: this CPU or OS has no AMX; not measured"),
    }
}

/// One row's figures.
struct Measured {
    tok_s: f64,
    peak_bytes: f64,
}

impl Measured {
    fn of(json: &serde_json::Value) -> Self {
        Self {
            tok_s: json["tok_s"].as_f64().expect("tok_s"),
            peak_bytes: json["peak_bytes"].as_f64().expect("peak_bytes"),
        }
    }
}

/// `theirs | ratio` cells.
fn against(ours: &Measured, theirs: Option<&Measured>) -> String {
    match theirs {
        Some(t) => format!("{:.1} | {:.2}×", t.tok_s, ours.tok_s / t.tok_s),
        None => "n/a | n/a".into(),
    }
}

/// The rows' names: the prefill, then decode at each batch.
fn row_names() -> Vec<String> {
    std::iter::once(format!("prefill {PREFILL} tokens, batch 1"))
        .chain(
            BATCHES
                .iter()
                .map(|b| format!("decode {NEW} new tokens, batch {b}")),
        )
        .collect()
}

fn runs() -> usize {
    std::env::var("AGENTFLY_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

/// One row measured in this process: `prefill`, `decode:B` (the weights packed, as the
/// engine serves), `flex:B` (flex's own products), `bf16-prefill` and `bf16:B` (bf16
/// products on AMX, the serving copy packed in bf16). Its tokens/s and the process's peak
/// resident memory, as JSON.
fn measure_row(row: &str) -> serde_json::Value {
    let device_name = std::env::var("AGENTFLY_DEVICE").unwrap_or_else(|_| "cpu".into());
    let device = parse_device(&device_name).expect("device");
    let runs = runs();
    let mut model = Pretrained::load(common::smollm2_gguf(), &device).expect("load SmolLM2");
    // The same random inputs in every process.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let vocab = model.config.vocab_size as u32;
    let mut random_ids =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(100..vocab)).collect() };
    let prefill_ids = random_ids(PREFILL);
    let prompts: Vec<Vec<Vec<u32>>> = BATCHES
        .iter()
        .map(|&batch| (0..batch).map(|_| random_ids(PROMPT)).collect())
        .collect();
    let (kind, batch) = row.split_once(':').unwrap_or((row, "0"));
    let batch: usize = batch.parse().expect("a batch size");
    if kind.starts_with("bf16") {
        assert!(model.decoder.use_bf16_products(true), "bf16 on the CPU");
    }
    if kind != "flex" && kind != "prefill" {
        model.decoder.pack_for_decode();
    }
    let tok_s = if kind.ends_with("prefill") {
        let ids = Tensor::<2, Int>::from_data(
            TensorData::new(
                prefill_ids.iter().map(|&t| t as i64).collect::<Vec<_>>(),
                [1, PREFILL],
            ),
            &device,
        );
        prefill_last(&model, &ids);
        PREFILL as f64 / best_of(runs, || prefill_last(&model, &ids))
    } else {
        let b = BATCHES
            .iter()
            .position(|&b| b == batch)
            .expect("a bench batch");
        decode_rate(&model, &prompts[b], runs)
    };
    serde_json::json!({"tok_s": tok_s, "peak_bytes": common::peak_bytes()})
}

/// One forward pass over the prefill's ids, the last position's logits read back.
fn prefill_last(model: &Pretrained, ids: &Tensor<2, Int>) {
    let logits = model.decoder.forward(ids.clone(), &model.rope);
    let _ = logits.narrow(1, PREFILL - 1, 1).into_data();
}

/// The bf16 measurements against transformers in bf16 and in f32.
fn bf16_table(
    prefill: &Measured,
    decode: &[Measured],
    peer_bf16: &[Option<Measured>],
    peer_f32: &[Option<Measured>],
) {
    println!("\nbf16 products on AMX (`--bf16`), against transformers in bf16 and in f32\n");
    println!(
        "| measurement | agentfly bf16 tok/s | transformers bf16 tok/s | ratio | transformers f32 tok/s | ratio | agentfly peak GB | transformers bf16 peak GB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let ours = std::iter::once(prefill).chain(decode);
    for (((name, ours), bf16), f32) in row_names().iter().zip(ours).zip(peer_bf16).zip(peer_f32) {
        println!(
            "| {name} | {:.1} | {} | {} | {:.1} | {} |",
            ours.tok_s,
            against(ours, bf16.as_ref()),
            against(ours, f32.as_ref()),
            ours.peak_bytes / 1e9,
            bf16.as_ref()
                .map_or("n/a".into(), |t| format!("{:.1}", t.peak_bytes / 1e9)),
        );
    }
}

/// Decode tokens/s of `model` for a batch of `prompts`: `NEW - 1` tokens per row over the
/// time of `NEW` minus that of one (the prefill and first token).
fn decode_rate(model: &Pretrained, batch: &[Vec<u32>], runs: usize) -> f64 {
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
}
