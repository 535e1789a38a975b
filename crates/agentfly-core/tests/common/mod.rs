//! Where the reference fixtures are: `$AGENTFLY_FIXTURES`, else `../shared/fixtures` beside
//! the repository (as on developer machines and in CI). Missing fixtures fail the test.

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    let dir = std::env::var_os("AGENTFLY_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
        PathBuf::from,
    );
    assert!(
        dir.join("README.md").exists(),
        "fixtures not found at {} (set AGENTFLY_FIXTURES)",
        dir.display()
    );
    dir
}

/// Qwen3's tokenizer, its chat template and its end-of-turn id (`<|im_end|>`).
#[allow(dead_code)]
pub fn qwen3() -> (
    agentfly_core::chat::Tokenizer,
    agentfly_core::chat::ChatTemplate,
    u32,
) {
    let dir = fixtures().join("qwen3-template");
    let tokenizer = agentfly_core::chat::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let template = agentfly_core::chat::ChatTemplate::from_tokenizer_config(&config).unwrap();
    let eot = tokenizer.token_to_id("<|im_end|>").unwrap();
    (tokenizer, template, eot)
}
