//! What the benchmarks share: the repository, the SmolLM2 files, and running the Python
//! peer.

#![allow(dead_code)]

use agentfly_trainer::Pretrained;
use burn::tensor::Device;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The SmolLM2 GGUF (fetched by `scripts/fetch-smollm2.sh`).
pub fn smollm2_gguf() -> PathBuf {
    let gguf = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(gguf.exists(), "run scripts/fetch-smollm2.sh first");
    gguf
}

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
    let python = std::env::var("AGENTFLY_BENCH_PYTHON")
        .map_or_else(|_| repo().join(".venv-bench/bin/python"), PathBuf::from);
    if !Path::new(&python).exists() {
        eprintln!(
            "{} is missing: run scripts/bench/setup-venv.sh to compare with the peer",
            python.display()
        );
        return None;
    }
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
