//! What the metadata says: the model configuration (`llama.*` / `qwen2.*` keys, in
//! `config.json` form), the BPE vocabulary (`tokenizer.ggml.*`), the special tokens and the
//! chat template.

use super::file::{GgufFile, MetaValue};
use crate::error::ModelError;
use crate::model::ModelConfig;
use agentfly_core::chat::BpeVocabulary;
use serde_json::{Value, json};

impl GgufFile {
    fn int(&self, key: &str) -> Option<i64> {
        match self.metadata.get(key) {
            Some(MetaValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn float(&self, key: &str) -> Option<f64> {
        match self.metadata.get(key) {
            Some(MetaValue::Float(v)) => Some(*v),
            Some(MetaValue::Int(v)) => Some(*v as f64),
            _ => None,
        }
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Option<&str> {
        match self.metadata.get(key) {
            Some(MetaValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn strings(&self, key: &str) -> Option<Vec<String>> {
        match self.metadata.get(key) {
            Some(MetaValue::Array(items)) => items
                .iter()
                .map(|v| match v {
                    MetaValue::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    fn config_error(&self, message: impl Into<String>) -> ModelError {
        ModelError::Config {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// The model configuration from the `llama.*` / `qwen2.*` metadata, in
    /// `config.json` form.
    pub fn config(&self) -> Result<ModelConfig, ModelError> {
        let arch = self
            .string("general.architecture")
            .ok_or_else(|| self.config_error("no general.architecture"))?
            .to_string();
        let (model_type, class) = match arch.as_str() {
            "llama" => ("llama", "LlamaForCausalLM"),
            "qwen2" => ("qwen2", "Qwen2ForCausalLM"),
            other => {
                return Err(self.config_error(format!(
                    "unsupported architecture `{other}`: agentfly runs the llama and qwen2 families"
                )));
            }
        };
        let need = |key: &str| {
            self.int(&format!("{arch}.{key}"))
                .map(|v| v as usize)
                .ok_or_else(|| self.config_error(format!("missing metadata `{arch}.{key}`")))
        };
        let heads = need("attention.head_count")?;
        let vocab = match self.int(&format!("{arch}.vocab_size")) {
            Some(v) => v as usize,
            None => self
                .strings("tokenizer.ggml.tokens")
                .map(|t| t.len())
                .unwrap_or(0),
        };
        let tied = !self.tensors.iter().any(|t| t.name == "output.weight");
        let config = json!({
            "architectures": [class],
            "model_type": model_type,
            "vocab_size": vocab,
            "hidden_size": need("embedding_length")?,
            "intermediate_size": need("feed_forward_length")?,
            "num_hidden_layers": need("block_count")?,
            "num_attention_heads": heads,
            "num_key_value_heads": self.int(&format!("{arch}.attention.head_count_kv")).map_or(heads, |v| v as usize),
            "rms_norm_eps": self.float(&format!("{arch}.attention.layer_norm_rms_epsilon")).unwrap_or(1e-6),
            "rope_theta": self.float(&format!("{arch}.rope.freq_base")).unwrap_or(10_000.0),
            "max_position_embeddings": self.int(&format!("{arch}.context_length")).unwrap_or(4096),
            "tie_word_embeddings": tied,
            "bos_token_id": self.int("tokenizer.ggml.bos_token_id"),
            "eos_token_id": self.int("tokenizer.ggml.eos_token_id"),
            "hidden_act": "silu",
        });
        serde_json::from_value(config).map_err(|e| self.config_error(e.to_string()))
    }

    /// The BPE vocabulary (`tokenizer.ggml.*`).
    pub fn vocabulary(&self) -> Result<BpeVocabulary, ModelError> {
        let model = self.string("tokenizer.ggml.model").unwrap_or("");
        if model != "gpt2" {
            return Err(self.config_error(format!(
                "tokenizer model `{model}` is not supported (byte-level BPE, `gpt2`, is)"
            )));
        }
        let token_types = match self.metadata.get("tokenizer.ggml.token_type") {
            Some(MetaValue::Array(items)) => items
                .iter()
                .map(|v| {
                    if let MetaValue::Int(i) = v {
                        *i as i32
                    } else {
                        1
                    }
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(BpeVocabulary {
            tokens: self
                .strings("tokenizer.ggml.tokens")
                .ok_or_else(|| self.config_error("no tokenizer.ggml.tokens"))?,
            merges: self.strings("tokenizer.ggml.merges").unwrap_or_default(),
            token_types,
            pre: self
                .string("tokenizer.ggml.pre")
                .unwrap_or("gpt2")
                .to_string(),
        })
    }

    /// The special-token ids: (bos, eos).
    pub fn special_ids(&self) -> (Option<u32>, Option<u32>) {
        let id = |k: &str| self.int(k).map(|v| v as u32);
        (
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
        )
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.string("general.architecture")
    }
}

/// The `tokenizer_config.json` a GGUF file implies (chat template and special tokens).
pub fn tokenizer_config(file: &GgufFile, vocab: &BpeVocabulary) -> Value {
    let (bos, eos) = file.special_ids();
    let token = |id: Option<u32>| id.and_then(|i| vocab.tokens.get(i as usize)).cloned();
    json!({
        "chat_template": file.string("tokenizer.chat_template"),
        "bos_token": token(bos),
        "eos_token": token(eos),
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
}
