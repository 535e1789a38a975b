//! Training throughput of SmolLM2-135M in f32 (`AGENTFLY_DEVICE`, default cpu): one step
//! of forward, backward, global-norm clipping and AdamW on the causal-LM loss, micro-batch
//! 4 × 512 tokens, against the same step in PyTorch (transformers) on the same weights in
//! the same run.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-trainer --bench training
//! ```

use agentfly_trainer::Pretrained;
use agentfly_trainer::train::{OptimConfig, Packed, clip_grad_norm, sft_loss, token_logprobs};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};
use rand::{Rng, SeedableRng};

mod common;
use std::time::Instant;

const BATCH: usize = 4;
const SEQ: usize = 512;
const RUNS: usize = 3;

fn main() {
    agentfly_trainer::alloc::retain_freed_memory();
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let gguf = common::smollm2_gguf();
    let device_name = std::env::var("AGENTFLY_DEVICE").unwrap_or_else(|_| "cpu".into());
    let device = agentfly_trainer::device::parse_device(&device_name)
        .expect("device")
        .autodiff();
    let model = Pretrained::load(&gguf, &device).expect("load SmolLM2");
    let hf_dir = common::smollm2_hf_dir();
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
    let mut decoder = model.decoder.clone();
    let profile = std::env::var_os("AGENTFLY_BENCH_PROFILE").is_some();
    let mut step = |decoder: agentfly_trainer::model::Decoder| {
        let t = Instant::now();
        let (lp, _) = token_logprobs(&decoder, &model.rope, packed.ids.clone(), false);
        let loss = sft_loss(lp, weights.clone());
        let value = loss.clone().into_scalar::<f32>();
        let forward = t.elapsed().as_secs_f64();
        let mut grads = GradientsParams::from_grads(loss.backward(), &decoder);
        let backward = t.elapsed().as_secs_f64() - forward;
        clip_grad_norm(&decoder, &mut grads, 1.0);
        let clip = t.elapsed().as_secs_f64() - forward - backward;
        let d = optim.step(config.lr, decoder, grads);
        let _ = d.norm.weight.val().into_data();
        if profile {
            let adam = t.elapsed().as_secs_f64() - forward - backward - clip;
            eprintln!(
                "loss {value:.3}: forward {forward:.2}s backward {backward:.2}s clip {clip:.2}s adamw {adam:.2}s"
            );
        }
        d
    };
    eprintln!("agentfly: warm-up step ...");
    decoder = step(decoder);
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let start = Instant::now();
        decoder = step(decoder);
        // Make sure the update happened before the clock stops.
        let _ = decoder.norm.weight.val().into_data();
        best = best.min(start.elapsed().as_secs_f64());
    }
    let peer = common::run_peer(
        "transformers_train.py",
        &[
            "--model".into(),
            hf_dir.to_string_lossy().into_owned(),
            "--batch".into(),
            BATCH.to_string(),
            "--seq".into(),
            SEQ.to_string(),
            "--runs".into(),
            RUNS.to_string(),
        ],
    );
    let tokens = (BATCH * SEQ) as f64;
    println!("\n## Training step: SmolLM2-135M-Instruct, f32, CPU, micro-batch {BATCH} × {SEQ}\n");
    println!("| measurement | agentfly (burn flex) | PyTorch (transformers) | ratio |");
    println!("|---|---:|---:|---:|");
    let theirs = peer.as_ref().and_then(|p| p["seconds"].as_f64());
    println!(
        "| forward + backward + clip + AdamW, tokens/s | {:.0} | {} | {} |",
        tokens / best,
        theirs.map_or("-".into(), |t| format!("{:.0}", tokens / t)),
        theirs.map_or("-".into(), |t| format!("{:.2}×", t / best)),
    );
    println!(
        "| seconds per step | {best:.2} | {} | |",
        theirs.map_or("-".into(), |t| format!("{t:.2}"))
    );
    if let Some(p) = &peer {
        println!("\npeer: torch {} with {} threads", p["torch"], p["threads"]);
    }
}
