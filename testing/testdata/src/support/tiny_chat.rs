//! The tiny Qwen2 fixture made a chat model (a byte-level tokenizer and a ChatML template
//! written here), and a short RL run's configuration over it, for the training-loop tests.

use super::{device, fixtures};
use agentfly_core::reward;
use agentfly_model::Pretrained;
use agentfly_model::model::{Decoder, ModelConfig};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// 1 when the response has an odd number of characters: a reward the random tiny model
/// earns about half the time, so groups of sampled chains differ and every RL step has
/// something to learn.
#[reward]
pub fn odd_length(response: &str) -> f32 {
    (response.chars().count() % 2) as f32
}

/// GPT-2's byte-to-character table of byte-level BPE.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .map(u32::from)
        .collect();
    let mut chars: Vec<(u32, u32)> = printable.iter().map(|&b| (b, b)).collect();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            chars.push((b, 256 + extra));
            extra += 1;
        }
    }
    printable.clear();
    chars.sort();
    chars
        .into_iter()
        .map(|(_, c)| char::from_u32(c).unwrap())
        .collect()
}

/// A tiny chat model in a fresh directory: the fixture's weights, one token per byte.
pub fn tiny_chat_model(dir: &Path) -> PathBuf {
    let template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    chat_model(
        &dir.join("tiny-chat"),
        &["<|im_start|>", "<|im_end|>"],
        json!({"chat_template": template, "eos_token": "<|im_end|>"}),
        None,
    )
}

/// The fixture's weights with a byte-level tokenizer whose special tokens are `specials`
/// (ids 256, 257, ...), `tokenizer_config`, and `eos_token_id` when given.
pub fn chat_model(
    model: &Path,
    specials: &[&str],
    tokenizer_config: Value,
    eos_token_id: Option<Value>,
) -> PathBuf {
    std::fs::create_dir_all(model).unwrap();
    let src = fixtures().join("tiny-qwen2");
    std::fs::copy(
        src.join("model.safetensors"),
        model.join("model.safetensors"),
    )
    .unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    if let Some(eos) = eos_token_id {
        config["eos_token_id"] = eos;
    }
    std::fs::write(model.join("config.json"), config.to_string()).unwrap();
    let vocab: serde_json::Map<String, Value> = byte_chars()
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), json!(i)))
        .collect();
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, content)| {
            json!({"id": 256 + i, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": []}
    });
    std::fs::write(model.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(
        model.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
    .unwrap();
    model.to_path_buf()
}

/// A short RL run's configuration over `model` (calculator tools, the `odd_length` reward,
/// which the test defines), writing to `out` under `dir`.
pub fn write_config(dir: &Path, model: &Path, steps: usize, out: &str) -> PathBuf {
    let data = dir.join("train.jsonl");
    let lines: String = (0..12)
        .map(|i| {
            format!(
                "{}\n",
                json!({"id": format!("q{i}"), "question": format!("{i}+{i}?")})
            )
        })
        .collect();
    std::fs::write(&data, lines).unwrap();
    let config = format!(
        r#"
[model]
path = "{model}"

[data]
train = "train.jsonl"

[agent]
tools = ["calculator", "submit_answer"]
reward = "odd_length"
system_prompt = "Use tools."

[chain]
max_turns = 2
max_tokens_per_turn = 12
max_total_tokens = 200
temperature = 1.0

[rollout]
chains = 4
samples_per_step = 3
concurrency = 16
max_rounds = 2

[train]
steps = {steps}
seed = 7
ppo_epochs = 2

[optim]
lr = 1e-3

[output]
dir = "{out}"
checkpoint_every = 1
"#,
        model = model.display()
    );
    let path = dir.join(format!("{out}-{steps}.toml"));
    std::fs::write(&path, config).unwrap();
    path
}

/// Every weight of the model in `dir`, in name order.
pub fn weights(dir: &Path) -> Vec<f32> {
    let model = Pretrained::load(dir, &device()).unwrap();
    flat(&model.decoder, &model.config)
}

/// Every weight of `decoder`, in name order.
pub fn flat(decoder: &Decoder, config: &ModelConfig) -> Vec<f32> {
    let w = decoder.to_weights(config);
    let mut all: Vec<(&str, &agentfly_model::io::HostTensor)> = w.iter().collect();
    all.sort_by_key(|(name, _)| *name);
    all.into_iter().flat_map(|(_, t)| t.data.clone()).collect()
}
