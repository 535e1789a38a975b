//! The repository's reference fixtures (`fixtures/`, see its README).

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    assert!(
        dir.join("README.md").exists(),
        "{} is missing: the reference fixtures are part of the repository; restore them with `git checkout -- fixtures`",
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
