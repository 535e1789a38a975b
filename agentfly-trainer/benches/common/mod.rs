//! What the benchmarks share: the repository, the SmolLM2 files, and running the Python
//! peer.

#![allow(dead_code)]

use agentfly_trainer::Pretrained;
use burn::tensor::Device;
use std::path::PathBuf;
use std::process::Command;

pub use agentfly_testdata::{repo, smollm2_gguf};

// As in the `agentfly` binary: freed memory is kept for the next step
// (agentfly_trainer::alloc); `main` calls `retain_freed_memory` first.
#[global_allocator]
static ALLOC: agentfly_trainer::alloc::Allocator = agentfly_trainer::alloc::Allocator;

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
    let Some(python) = agentfly_testdata::python_if_present() else {
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
