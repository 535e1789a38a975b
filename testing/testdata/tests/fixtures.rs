//! The reference fixtures are what Hugging Face transformers computes from their inputs
//! today: `fixtures/regenerate.py --check` recomputes every output (logits, greedy ids,
//! chat-template renders, token ids) and compares.

use agentfly_testdata::{python, repo, smollm2_gguf};
use std::process::Command;

#[test]
fn the_fixtures_are_what_transformers_computes() {
    let out = Command::new(python())
        .arg(repo().join("fixtures/regenerate.py"))
        .arg("--check")
        .arg("--smollm2")
        .arg(smollm2_gguf())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "tiny-qwen2",
        "smollm2",
        "qwen3-template",
        "tokenizer-vectors",
        "tiny-qwen2-gguf",
    ] {
        assert!(
            stdout.contains(&format!("{name}: checked\n")),
            "{name} was not checked:\n{stdout}"
        );
    }
}
