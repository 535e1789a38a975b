//! Training throughput of SmolLM2-135M in f32 (`AGENTFLY_DEVICE`, default cpu), against
//! PyTorch (transformers) on the same weights in the same run, at two shapes:
//!
//! - **lm**: one step of forward, backward, global-norm clipping and AdamW on the causal-LM
//!   loss of a micro-batch of 4 × 512 tokens (every position learns);
//! - **lm-lora**: the same step training LoRA adapters (rank 16, alpha 32, every
//!   projection; PEFT on the peer's side) instead of every weight;
//! - **rl**: one PPO update (old log-probs, then the clipped surrogate with gradient
//!   accumulation, clipping, AdamW) over 16 trajectories of mixed lengths (192–1024 tokens)
//!   where only the sampled turns (about a third of the tokens) learn: agentfly's own
//!   `policy_update`; the peer does it the way Python RL trainers do on one device.
//!
//! Each shape runs in a child process of its own, so its peak resident memory is its own;
//! the table ends with the machine's matrix-multiply rate measured in the same run.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-trainer --bench training
//! ```

use agentfly_model::Pretrained;
use agentfly_trainer::train::{
    Actor, OptimConfig, Packed, PolicyRow, TrainSection, clip_grad_norm, policy_update, sft_loss,
    token_logprobs,
};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::time::Instant;

use agentfly_testdata::bench as common;

// As in the `agentfly` binary: freed memory is kept for the next step
// (agentfly_model::alloc); `main` calls `retain_freed_memory` first.
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

const BATCH: usize = 4;
const SEQ: usize = 512;
const RL_ROWS: usize = 16;
/// The peer's micro-batch: rows in the batch's order (TRL's per-device batch of 4).
const PEER_ROWS_PER_MICRO: usize = 4;
const RUNS: usize = 3;
const LORA_RANK: usize = 16;

fn main() {
    agentfly_model::alloc::retain_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--shape") {
        let result = match args[i + 1].as_str() {
            "lm" => lm_shape(false),
            "lm-lora" => lm_shape(true),
            "rl" => rl_shape(),
            "matmul" => json!({"flops": common::matmul_flops(&device(), RUNS)}),
            other => panic!("unknown shape {other}"),
        };
        println!("{result}");
        return;
    }
    let hf_dir = common::smollm2_hf_dir();
    let model_arg = hf_dir.to_string_lossy().into_owned();
    let mut table = Vec::new();
    let lm_args = vec![
        "--batch".to_string(),
        BATCH.to_string(),
        "--seq".into(),
        SEQ.to_string(),
    ];
    let lora_args = [
        lm_args.clone(),
        vec!["--lora-rank".into(), LORA_RANK.to_string()],
    ]
    .concat();
    for (shape, label, script, extra) in [
        (
            "lm",
            format!("causal-LM step, {BATCH} × {SEQ} (every position learns)"),
            "transformers_train.py",
            lm_args,
        ),
        (
            "lm-lora",
            format!("the same, LoRA rank {LORA_RANK} on every projection"),
            "transformers_train.py",
            lora_args,
        ),
        (
            "rl",
            format!("PPO update, {RL_ROWS} trajectories of 192–1024 tokens (sampled turns learn)"),
            "transformers_rl_step.py",
            vec![
                "--rows".to_string(),
                rows_file().to_string_lossy().into_owned(),
            ],
        ),
    ] {
        eprintln!("agentfly: {label} ...");
        let ours = common::run_child(&["--shape", shape]);
        let mut peer_args = vec!["--model".to_string(), model_arg.clone()];
        peer_args.extend(extra);
        peer_args.extend(["--runs".to_string(), RUNS.to_string()]);
        let peer = common::run_peer(script, &peer_args);
        table.push((label, ours, peer));
    }
    println!("\n## Training: SmolLM2-135M-Instruct, f32, CPU\n");
    println!(
        "| shape | tokens | agentfly (burn flex) tok/s | PyTorch tok/s | ratio | agentfly s/step | PyTorch s/step | agentfly peak GB | PyTorch peak GB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (label, ours, peer) in &table {
        let tokens = ours["tokens"].as_f64().expect("tokens");
        let mine = ours["seconds"].as_f64().expect("seconds");
        let theirs = peer.as_ref().and_then(|p| p["seconds"].as_f64());
        let fmt = |x: Option<f64>, f: &dyn Fn(f64) -> String| x.map_or("-".into(), f);
        println!(
            "| {label} | {tokens:.0} | {:.0} | {} | {} | {mine:.2} | {} | {:.1} | {} |",
            tokens / mine,
            fmt(theirs, &|t| format!("{:.0}", tokens / t)),
            fmt(theirs, &|t| format!("{:.2}×", t / mine)),
            fmt(theirs, &|t| format!("{t:.2}")),
            ours["peak_bytes"].as_f64().unwrap_or(0.0) / 1e9,
            fmt(
                peer.as_ref().and_then(|p| p["peak_bytes"].as_f64()),
                &|b| format!("{:.1}", b / 1e9)
            ),
        );
    }
    // In a child too, after the shapes: the matrix-multiply rate the machine had meanwhile.
    let probe = common::run_child(&["--shape", "matmul"]);
    println!(
        "\nmachine: a [512, 576] × [576, 1536] product at {:.1} GFLOP/s (flex, measured after the shapes)",
        probe["flops"].as_f64().expect("flops") / 1e9
    );
    if let Some((_, _, Some(p))) = table.first() {
        println!("\npeer: torch {} with {} threads", p["torch"], p["threads"]);
    }
}

fn device() -> burn::tensor::Device {
    let name = std::env::var("AGENTFLY_DEVICE").unwrap_or_else(|_| "cpu".into());
    // As a run trains by default (`train.gradient_checkpointing`).
    let checkpointing = TrainSection::default().gradient_checkpointing;
    agentfly_model::device::training(
        agentfly_model::device::parse_device(&name).expect("device"),
        checkpointing,
    )
}

/// Best of `RUNS` timed calls after one warm-up, with the phases on stderr when
/// `AGENTFLY_BENCH_PROFILE` is set.
fn best_of(mut step: impl FnMut() -> String) -> f64 {
    let profile = std::env::var_os("AGENTFLY_BENCH_PROFILE").is_some();
    let mut best = f64::INFINITY;
    for run in 0..=RUNS {
        let start = Instant::now();
        let phases = step();
        let took = start.elapsed().as_secs_f64();
        if profile {
            eprintln!(
                "  {}: {took:.2}s {phases}",
                if run == 0 { "warm-up" } else { "step" }
            );
        }
        if run > 0 {
            best = best.min(took);
        }
    }
    best
}

fn lm_shape(lora: bool) -> serde_json::Value {
    let device = device();
    let model = Pretrained::load(common::smollm2_gguf(), &device).expect("load SmolLM2");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let vocab = model.config.vocab_size as u32;
    let seqs: Vec<Vec<u32>> = (0..BATCH)
        .map(|_| (0..SEQ).map(|_| rng.random_range(100..vocab)).collect())
        .collect();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let weights = vec![1.0 / (BATCH * (SEQ - 1)) as f32; BATCH * (SEQ - 1)];
    let weights: Tensor<2> = Tensor::from_data(TensorData::new(weights, [BATCH, SEQ - 1]), &device);
    let config = OptimConfig {
        lr: 1e-6,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let mut optim = config.init();
    let mut decoder = Some(if lora {
        let config = agentfly_model::model::LoraConfig {
            rank: LORA_RANK,
            alpha: 32.0,
            ..Default::default()
        };
        model.decoder.clone().with_lora(&model.config, &config, 0)
    } else {
        model.decoder.clone()
    });
    let seconds = best_of(|| {
        let t = Instant::now();
        let d = decoder.take().expect("decoder");
        let (lp, _) = token_logprobs(&d, &model.rope, packed.ids.clone(), false);
        let loss = sft_loss(lp, weights.clone());
        let value = loss.clone().into_scalar::<f32>();
        let forward = t.elapsed().as_secs_f64();
        let mut grads = GradientsParams::from_grads(loss.backward(), &d);
        let backward = t.elapsed().as_secs_f64() - forward;
        clip_grad_norm(&d, &mut grads, 1.0);
        let d = optim.step(config.lr, d, grads);
        // Make sure the update happened before the clock stops.
        let _ = d.norm.weight.val().into_data();
        decoder = Some(d);
        format!("(loss {value:.3}: forward {forward:.2}s, backward {backward:.2}s)")
    });
    json!({"tokens": BATCH * SEQ, "seconds": seconds, "peak_bytes": common::peak_bytes()})
}

/// 16 trajectories: a prompt, then sampled turns (learned) and tool observations (not)
/// in turn, with one advantage per trajectory. Written for the peer too.
fn rl_rows() -> Vec<PolicyRow> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    (0..RL_ROWS)
        .map(|_| {
            let len = rng.random_range(192..=1024);
            let tokens: Vec<u32> = (0..len).map(|_| rng.random_range(100..49152)).collect();
            let mut mask = vec![0.0; len];
            let mut t = rng.random_range(100..160);
            while t < len {
                let turn = rng.random_range(24..64).min(len - t);
                mask[t..t + turn].fill(1.0);
                t += turn + rng.random_range(24..64);
            }
            let advantage = if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            PolicyRow {
                tokens,
                advantages: vec![advantage; len],
                mask,
                ..PolicyRow::default()
            }
        })
        .collect()
}

fn rows_file() -> std::path::PathBuf {
    let path = common::repo().join("target/bench/rl_rows.json");
    let rows: Vec<_> = rl_rows()
        .into_iter()
        .map(|r| json!({"tokens": r.tokens, "mask": r.mask, "advantage": r.advantages[0]}))
        .collect();
    std::fs::create_dir_all(path.parent().expect("dir")).expect("target/bench");
    let spec = json!({"rows": rows, "micro_batch_rows": PEER_ROWS_PER_MICRO});
    std::fs::write(&path, spec.to_string()).expect("write the rows");
    path
}

fn rl_shape() -> serde_json::Value {
    let device = device();
    let model = Pretrained::load(common::smollm2_gguf(), &device).expect("load SmolLM2");
    let rows = rl_rows();
    let tokens: usize = rows.iter().map(|r| r.tokens.len()).sum();
    let config = OptimConfig {
        lr: 1e-6,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), config, 100);
    let section = TrainSection::default();
    let seconds = best_of(|| {
        let report = policy_update(&mut actor, &mut None, None, &rows, &section, 0);
        let _ = actor.decoder().norm.weight.val().into_data();
        format!(
            "(loss {:.4}, {} learned tokens, {} micro-batches)",
            report.loss, report.tokens, report.micro_batches
        )
    });
    json!({"tokens": tokens, "seconds": seconds, "peak_bytes": common::peak_bytes()})
}
