//! What the benchmarks share: the repository, the SmolLM2 files, and running the Python
//! peer. (Each bench declares the allocator itself: `agentfly_model::alloc`.)

use agentfly_model::Pretrained;
use burn::tensor::Device;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

pub use crate::{repo, smollm2_gguf};

/// The same weights as a Hugging Face directory, for the peer (saved once).
pub fn smollm2_hf_dir() -> PathBuf {
    let dir = repo().join("target/bench/smollm2-hf");
    if !dir.join("model.safetensors").exists() {
        Pretrained::load(smollm2_gguf(), &Device::flex())
            .expect("load SmolLM2")
            .save(&dir)
            .expect("save HF directory");
    }
    dir
}

/// Runs `scripts/bench/<script>` with `args` in the benchmark venv and parses its JSON
/// output; `None` (with the reason on stderr) when the venv is missing or the peer fails.
pub fn run_peer(script: &str, args: &[String]) -> Option<serde_json::Value> {
    let Some(python) = crate::python_if_present() else {
        eprintln!(
            "no transformers venv: run `scripts/setup` (or set AGENTFLY_PYTHON) to compare with the peer"
        );
        return None;
    };
    eprintln!("measuring the peer ({script}) ...");
    let out = Command::new(&python)
        .arg(repo().join("scripts/bench").join(script))
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("the peer failed:\n{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// FLOP/s of a `[512, 576] × [576, 1536]` product (the shape of the model's projections) on
/// `device`, best of `runs` rounds of 10: the machine's matrix-multiply rate at the time of
/// the run, printed beside the figures because this machine kind's speed drifts.
pub fn matmul_flops(device: &Device, runs: usize) -> f64 {
    use burn::tensor::{Distribution, Tensor};
    let normal = Distribution::Normal(0.0, 1.0);
    let a = Tensor::<2>::random([512, 576], normal, device);
    let b = Tensor::<2>::random([576, 1536], normal, device);
    let _ = a.clone().matmul(b.clone()).into_data();
    let seconds = (0..runs)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..10 {
                let _ = a.clone().matmul(b.clone()).into_data();
            }
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    10.0 * 2.0 * 512.0 * 576.0 * 1536.0 / seconds
}

/// The process's peak resident memory so far (Linux `VmHWM`), in bytes.
pub fn peak_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}

/// Runs this bench binary again with `args` (one measurement in a process of its own, so
/// that its peak resident memory is its own) and parses the JSON it prints.
pub fn run_child(args: &[&str]) -> serde_json::Value {
    let out = Command::new(std::env::current_exe().expect("own path"))
        .args(args)
        .output()
        .expect("run the bench's child");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child {args:?} failed");
    serde_json::from_slice(&out.stdout).expect("the child's JSON")
}
