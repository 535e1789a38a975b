//! The decoder's hyper-parameters, named as in a Hugging Face `config.json` (Llama and
//! Qwen2 families), with the defaults transformers applies.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A Llama / Qwen2 decoder configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `LlamaForCausalLM` or `Qwen2ForCausalLM`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `llama` or `qwen2`.
    pub model_type: String,
    /// Number of token ids.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to the query heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// Rotary base (older configs); see [`ModelConfig::rope_theta`].
    #[serde(
        default,
        rename = "rope_theta",
        skip_serializing_if = "Option::is_none"
    )]
    pub rope_theta_field: Option<f64>,
    /// Rotary parameters (transformers 5: `{"rope_theta": ..., "rope_type": "default"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<Value>,
    /// Longest position the rotary tables are built for.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// The output projection is the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// q/k/v (and o) projections have biases (Llama option; always q/k/v for Qwen2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// Beginning-of-sequence id.
    #[serde(default)]
    pub bos_token_id: Option<Value>,
    /// End-of-sequence id(s).
    #[serde(default)]
    pub eos_token_id: Option<Value>,
    /// Must be `silu`.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Every other key of config.json, kept so a saved model round-trips unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_max_positions() -> usize {
    4096
}
fn default_act() -> String {
    "silu".into()
}

/// The model families this decoder implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama (SmolLM2, Llama 2/3...): optional attention bias.
    Llama,
    /// Qwen2 / Qwen2.5: biases on q, k and v.
    Qwen2,
}

impl ModelConfig {
    /// The family, from `model_type` (or `architectures`); `None` when unsupported.
    pub fn family(&self) -> Option<Family> {
        let arch = self.architectures.first().map(String::as_str).unwrap_or("");
        match (self.model_type.as_str(), arch) {
            ("llama", _) | (_, "LlamaForCausalLM") => Some(Family::Llama),
            ("qwen2", _) | (_, "Qwen2ForCausalLM") => Some(Family::Qwen2),
            _ => None,
        }
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// The rotary base: `rope_parameters.rope_theta`, else `rope_theta`, else 10000.
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|p| p["rope_theta"].as_f64())
            .or(self.rope_theta_field)
            .unwrap_or(10_000.0)
    }

    /// Do q, k and v have biases?
    pub fn qkv_bias(&self) -> bool {
        match self.family() {
            Some(Family::Qwen2) => true,
            _ => self.attention_bias.unwrap_or(false),
        }
    }

    /// Does o have a bias (Llama with `attention_bias`)?
    pub fn o_bias(&self) -> bool {
        self.family() == Some(Family::Llama) && self.attention_bias.unwrap_or(false)
    }

    /// The end-of-sequence ids (`eos_token_id` may be one id or a list).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|n| n as u32)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Checks the numbers fit together; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.family().is_none() {
            return Err(format!(
                "unsupported architecture `{}` (model_type `{}`): agentfly runs the Llama and Qwen2 families",
                self.architectures
                    .first()
                    .map(String::as_str)
                    .unwrap_or("?"),
                self.model_type
            ));
        }
        if self.hidden_act != "silu" {
            return Err(format!(
                "hidden_act `{}` is not supported (only silu)",
                self.hidden_act
            ));
        }
        if self.num_attention_heads == 0
            || self.kv_heads() == 0
            || !self.num_attention_heads.is_multiple_of(self.kv_heads())
        {
            return Err(format!(
                "num_attention_heads ({}) must be a positive multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!(
                "head_dim ({}) must be even for rotary embeddings",
                self.head_dim()
            ));
        }
        Ok(())
    }
}
