//! A model saved by agentfly loads in Hugging Face transformers unchanged and computes the
//! reference logits; its tokenizer and chat template behave as the original's. Needs
//! `.venv-bench` with torch and transformers (`scripts/test` makes it) or `AGENTFLY_PYTHON`.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn check(dir: &Path, reference: &Path, extra: &[(&str, PathBuf)]) -> Value {
    let script = agentfly_testdata::repo().join("scripts/bench/check_transformers_load.py");
    let mut cmd = Command::new(agentfly_testdata::python());
    cmd.arg(script)
        .arg("--model")
        .arg(dir)
        .arg("--reference")
        .arg(reference);
    for (flag, path) in extra {
        cmd.arg(flag).arg(path);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "transformers failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn transformers_loads_a_saved_tiny_qwen2() {
    let fixtures = common::fixtures();
    let model = Pretrained::load(fixtures.join("tiny-qwen2"), &common::device()).unwrap();
    // Removed when dropped, also when an assertion fails (the save is ~1 MB here, 0.5 GB below).
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    model.save(dir).unwrap();
    let result = check(dir, &fixtures.join("tiny-qwen2/reference.safetensors"), &[]);
    let diff = result["max_abs_diff"].as_f64().unwrap();
    assert!(
        diff < 1e-4,
        "transformers on our save: max |Δlogit| = {diff}"
    );
}

#[test]
fn smollm2_gguf_saved_as_hf_loads_in_transformers_with_tokenizer_and_template() {
    let fixtures = common::fixtures();
    let model = Pretrained::load(common::smollm2_gguf(), &common::device()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    model.save(dir).unwrap();
    let result = check(
        dir,
        &fixtures.join("smollm2/reference.safetensors"),
        &[
            ("--tokenization", fixtures.join("smollm2/tokenization.json")),
            ("--greedy", fixtures.join("smollm2/greedy.json")),
        ],
    );
    let diff = result["max_abs_diff"].as_f64().unwrap();
    assert!(
        diff < 2e-3,
        "transformers on our save: max |Δlogit| = {diff}"
    );
    assert_eq!(result["tokenizer_mismatches"], serde_json::json!([]));
    assert_eq!(result["template_mismatches"], serde_json::json!([]));
}
