//! The decoder on a GPU backend agrees with the CPU backend and with transformers, one
//! policy update on it with the CPU's, and a whole RL run (the engine's rollouts, the
//! reference model, the updates, the checkpoints) with the CPU's.
//! Built only with `--features wgpu` or `--features cuda`; `AGENTFLY_GPU_DEVICE` names the
//! device (default `wgpu` when that feature is built, else `cuda`). Without a GPU, wgpu
//! runs on Mesa's software Vulkan (`apt-get install mesa-vulkan-drivers libvulkan1`):
//! `cargo test -p agentfly-trainer --features wgpu --test gpu_parity`; on a CUDA machine
//! `scripts/gpu-check` runs it with `--features cuda`.

#![cfg(any(feature = "wgpu", feature = "cuda"))]

use agentfly_testdata::support as common;

use agentfly_engine::generate::{SamplingParams, generate};
use agentfly_model::Pretrained;
use agentfly_model::device::parse_device;
use agentfly_model::io::Weights;
use agentfly_trainer::run::Trainer;
use agentfly_trainer::train::{
    Actor, OptimConfig, PolicyRow, StepReport, TrainSection, policy_update,
};
use burn::tensor::Device;
use burn::tensor::{Int, Tensor, TensorData};
use serde_json::Value;
use std::path::Path;

agentfly_core::link!(agentfly_tools);

/// The GPU device under test.
fn gpu() -> String {
    std::env::var("AGENTFLY_GPU_DEVICE").unwrap_or_else(|_| {
        if cfg!(feature = "wgpu") {
            "wgpu".into()
        } else {
            "cuda".into()
        }
    })
}

#[test]
fn tiny_qwen2_on_the_gpu_matches_transformers_and_the_cpu() {
    let fixtures = common::fixtures();
    let name = gpu();
    let device = parse_device(&name).unwrap();
    let gpu = Pretrained::load(fixtures.join("tiny-qwen2"), &device).unwrap();
    let (shape, ids, _, expected) =
        common::reference(fixtures.join("tiny-qwen2/reference.safetensors"));
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [shape[0], shape[1]]), &device);
    let got: Vec<f32> = gpu
        .decoder
        .forward(input, &gpu.rope)
        .into_data()
        .try_to_vec()
        .unwrap();
    let diff = common::max_abs_diff(&got, &expected);
    assert!(diff < 1e-4, "{name}: max |Δlogit| vs transformers = {diff}");

    let cpu = Pretrained::load(fixtures.join("tiny-qwen2"), &common::device()).unwrap();
    let prompt: Vec<u32> = vec![37, 235, 396, 72, 255, 393, 203, 133];
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let on_gpu = generate(&gpu, std::slice::from_ref(&prompt), &params, None).unwrap();
    let on_cpu = generate(&cpu, std::slice::from_ref(&prompt), &params, None).unwrap();
    assert_eq!(on_gpu[0].new_ids, on_cpu[0].new_ids);
    close_logprobs(&on_gpu[0].logprobs, &on_cpu[0].logprobs);
    // Top-k sampling: on the GPU only each row's k likeliest ids and its log-sum come back
    // to the sampler, on the CPU it reads whole rows; the draws are the same.
    let sampled = SamplingParams {
        temperature: 0.8,
        top_k: 5,
        seed: 9,
        ..params
    };
    let prompts = [prompt, vec![5, 9, 77, 12]];
    let on_gpu = generate(&gpu, &prompts, &sampled, None).unwrap();
    let on_cpu = generate(&cpu, &prompts, &sampled, None).unwrap();
    for (g, c) in on_gpu.iter().zip(&on_cpu) {
        assert_eq!(g.new_ids, c.new_ids);
        close_logprobs(&g.logprobs, &c.logprobs);
    }
}

fn close_logprobs(gpu: &[f32], cpu: &[f32]) {
    for (g, c) in gpu.iter().zip(cpu) {
        assert!(
            (g - c).abs() < 1e-4,
            "log-probability {g} on the GPU, {c} on the CPU"
        );
    }
}

/// One policy update of the tiny model on `device`: its report and the updated weights.
fn one_update(device: Device) -> (StepReport, Weights) {
    let model = Pretrained::load(
        common::fixtures().join("tiny-qwen2"),
        &agentfly_model::device::training(device, false),
    )
    .unwrap();
    // Large enough that every trained weight moves by ~1e-3, well above the tolerance.
    let optim = OptimConfig {
        lr: 1e-3,
        ..OptimConfig::default()
    };
    let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), optim, 10);
    let rows: Vec<PolicyRow> = [
        (vec![37u32, 235, 396, 72, 255, 393, 203, 133], 1.0),
        (vec![12, 99, 5, 310, 77, 41], -1.0),
    ]
    .into_iter()
    .map(|(tokens, advantage)| {
        // The prompt is the first three tokens; the rest were sampled.
        let mask: Vec<f32> = (0..tokens.len())
            .map(|i| if i >= 3 { 1.0 } else { 0.0 })
            .collect();
        let advantages = mask.iter().map(|m| m * advantage).collect();
        PolicyRow {
            tokens,
            mask,
            advantages,
            ..PolicyRow::default()
        }
    })
    .collect();
    let report = policy_update(
        &mut actor,
        &mut None,
        None,
        &rows,
        &TrainSection::default(),
        0,
    );
    let weights = actor.decoder().to_weights(&model.config);
    (report, weights)
}

#[test]
fn one_policy_update_on_the_gpu_matches_the_cpu() {
    let name = gpu();
    let (gpu_report, on_gpu) = one_update(parse_device(&name).unwrap());
    let (cpu_report, on_cpu) = one_update(common::device());
    assert_eq!(gpu_report.updates, 1, "{gpu_report:?}");
    assert!(gpu_report.skipped.is_none(), "{gpu_report:?}");
    let close = |a: f32, b: f32, rel: f32| (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-6);
    assert!(
        close(gpu_report.loss, cpu_report.loss, 1e-4),
        "{name} loss {} vs cpu {}",
        gpu_report.loss,
        cpu_report.loss
    );
    assert!(
        close(gpu_report.grad_norm, cpu_report.grad_norm, 1e-3),
        "{name} gradient norm {} vs cpu {}",
        gpu_report.grad_norm,
        cpu_report.grad_norm
    );
    // The weights after the step: AdamW's first step moves each weight with a gradient by
    // ~lr = 1e-3, so 1e-4 is a tenth of a step.
    let (mut worst, mut compared) = (0f32, 0usize);
    for name in on_cpu.names() {
        let (a, b) = (on_cpu.get(name).unwrap(), on_gpu.get(name).unwrap());
        assert_eq!(a.shape, b.shape, "{name}");
        worst = worst.max(common::max_abs_diff(&a.data, &b.data));
        compared += a.data.len();
    }
    assert!(compared > 0);
    eprintln!(
        "{name}: loss {} (cpu {}), gradient norm {} (cpu {}), max |Δweight| {worst:.1e}",
        gpu_report.loss, cpu_report.loss, gpu_report.grad_norm, cpu_report.grad_norm
    );
    assert!(
        worst < 1e-4,
        "{name}: a weight differs from the CPU's by {worst} after one update"
    );
}

/// The lines of a run's `metrics.jsonl`.
fn metrics(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_short_rl_run_on_the_gpu_matches_the_cpu() {
    use common::tiny_chat::{tiny_chat_model, write_config};
    let name = gpu();
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let run = |device: &str| {
        let config = write_config(dir.path(), &model, 2, device);
        let text = std::fs::read_to_string(&config).unwrap();
        let text = text
            .replace("[model]\n", &format!("[model]\ndevice = \"{device}\"\n"))
            // The reference model's pass measures the KL to the starting policy.
            .replace("[train]\n", "[train]\ntrack_kl = true\n");
        std::fs::write(&config, text).unwrap();
        let mut trainer = Trainer::from_config_file(&config).unwrap();
        let summary = trainer.train().unwrap();
        assert_eq!(summary.steps, 2, "{device}");
        dir.path().join(device)
    };
    let (on_gpu, on_cpu) = (run(&name), run("cpu"));
    let (gpu_steps, cpu_steps) = (metrics(&on_gpu), metrics(&on_cpu));
    assert_eq!(gpu_steps.len(), 2);
    assert!(
        gpu_steps.iter().any(|m| m["updates"].as_u64().unwrap() > 0),
        "{gpu_steps:?}"
    );
    assert!(
        gpu_steps.iter().any(|m| m["kl"].as_f64().unwrap() > 0.0),
        "the reference model's pass ran: {gpu_steps:?}"
    );
    for (g, c) in gpu_steps.iter().zip(&cpu_steps) {
        // The same rollouts: the seeded sampler drew the same tokens from both backends'
        // probabilities, which differ by float rounding only.
        for key in [
            "sampled_tokens",
            "trajectories",
            "tokens",
            "reward_mean",
            "tool_calls",
            "parse_errors",
            "dropped_groups",
            "updates",
        ] {
            assert_eq!(
                g[key], c[key],
                "step {}: `{key}` on {name} and on the cpu",
                g["step"]
            );
        }
        for (key, rel) in [
            ("entropy", 1e-3),
            ("kl", 1e-2),
            ("grad_norm", 1e-2),
            ("loss", 1e-2),
        ] {
            let (a, b) = (g[key].as_f64().unwrap(), c[key].as_f64().unwrap());
            assert!(
                (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-6),
                "step {}: `{key}` {a} on {name}, {b} on the cpu",
                g["step"]
            );
        }
    }
    // Two steps of two AdamW epochs at lr 1e-3 move the weights by several 1e-3; the
    // backends' rounding by ~1e-5 (one update: 5e-6).
    let load = |dir: &Path| {
        let model = Pretrained::load(dir, &common::device()).unwrap();
        model.decoder.to_weights(&model.config)
    };
    let (trained_gpu, trained_cpu, start) = (
        load(&on_gpu.join("model")),
        load(&on_cpu.join("model")),
        load(&model),
    );
    // Every weight of the two runs, and the largest difference by tensor.
    let (mut moved, mut diffs, mut worst) = (0f32, Vec::new(), (0f32, String::new()));
    for name in trained_cpu.names() {
        let cpu = &trained_cpu.get(name).unwrap().data;
        let gpu = &trained_gpu.get(name).unwrap().data;
        moved = moved.max(common::max_abs_diff(cpu, &start.get(name).unwrap().data));
        for (a, b) in cpu.iter().zip(gpu) {
            let d = (a - b).abs();
            diffs.push(d);
            if d > worst.0 {
                worst = (d, name.to_string());
            }
        }
    }
    diffs.sort_by(f32::total_cmp);
    let quantile = |q: f64| diffs[((diffs.len() - 1) as f64 * q) as usize];
    let far = diffs.iter().filter(|&&d| d > 1e-4).count();
    eprintln!(
        "{name}: a 2-step RL run; weights moved up to {moved:.1e}; |Δweight| to the cpu: \
         median {:.1e}, 99.99th percentile {:.1e}, max {:.1e} ({}), {far} of {} over 1e-4",
        quantile(0.5),
        quantile(0.9999),
        worst.0,
        worst.1,
        diffs.len()
    );
    assert!(moved > 1e-3, "training moved the weights by {moved}");
    // AdamW divides each gradient by its own running magnitude, so a component whose
    // gradient is near zero moves by up to ±lr at the whim of rounding, on either backend
    // (seen: one embedding component that the CPU run left in place and the wgpu run moved
    // by 1e-3). All others must agree to a tenth of a step.
    assert!(
        quantile(0.9999) < 1e-4 && far * 10_000 <= diffs.len(),
        "{name}: {far} of {} weights differ from the CPU run's by more than 1e-4",
        diffs.len()
    );
}
