//! A pretrained model as one value: configuration, decoder, rotary tables, tokenizer and
//! chat template, loaded from a Hugging Face directory or a GGUF file and saved back as a
//! Hugging Face directory that transformers loads unchanged.

use super::gguf::{self, GgufFile};
use super::{read_safetensors_dir, write_safetensors};
use crate::error::ModelError;
use crate::model::{Decoder, ModelConfig, Rope};
use agentfly_core::chat::{ChatTemplate, Tokenizer};
use burn::tensor::Device;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A loaded model with what it needs to read and write text.
#[derive(Debug)]
pub struct Pretrained {
    /// The configuration.
    pub config: ModelConfig,
    /// The network.
    pub decoder: Decoder,
    /// Rotary tables.
    pub rope: Rope,
    /// The tokenizer, when the model ships one.
    pub tokenizer: Option<Tokenizer>,
    /// The `tokenizer_config.json` (chat template, special tokens), when there is one.
    pub tokenizer_config: Option<Value>,
    /// Where it was loaded from.
    pub source: PathBuf,
}

fn read_json(path: &Path) -> Result<Value, ModelError> {
    let text = std::fs::read_to_string(path).map_err(ModelError::io(path))?;
    serde_json::from_str(&text)
        .map_err(|e| ModelError::format(path, format!("not valid JSON: {e}")))
}

impl Pretrained {
    /// Loads a Hugging Face directory or a `.gguf` file.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        let path = path.as_ref();
        if path.is_dir() {
            Self::load_dir(path, device)
        } else if path.extension().is_some_and(|e| e == "gguf") {
            Self::load_gguf(path, device)
        } else {
            Err(ModelError::format(
                path,
                "expected a Hugging Face model directory or a .gguf file",
            ))
        }
    }

    fn check(config: &ModelConfig, path: &Path) -> Result<(), ModelError> {
        config.validate().map_err(|message| ModelError::Config {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Loads a Hugging Face directory.
    pub fn load_dir(dir: &Path, device: &Device) -> Result<Self, ModelError> {
        let config_path = dir.join("config.json");
        let config: ModelConfig =
            serde_json::from_value(read_json(&config_path)?).map_err(|e| ModelError::Config {
                path: config_path.clone(),
                message: e.to_string(),
            })?;
        Self::check(&config, &config_path)?;
        let mut weights = read_safetensors_dir(dir)?;
        let decoder = Decoder::from_weights(&config, &mut weights, device)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = if tokenizer_path.exists() {
            Some(Tokenizer::from_file(&tokenizer_path)?)
        } else {
            None
        };
        let tc_path = dir.join("tokenizer_config.json");
        let tokenizer_config = if tc_path.exists() {
            Some(read_json(&tc_path)?)
        } else {
            None
        };
        Ok(Self {
            rope: Rope::for_config(&config, device),
            config,
            decoder,
            tokenizer,
            tokenizer_config,
            source: dir.to_path_buf(),
        })
    }

    /// Loads a GGUF file: weights dequantized to f32, tokenizer and chat template from
    /// its metadata.
    pub fn load_gguf(path: &Path, device: &Device) -> Result<Self, ModelError> {
        let file = GgufFile::open(path)?;
        let config = file.config()?;
        Self::check(&config, path)?;
        let mut weights = file.weights(&config)?;
        let decoder = Decoder::from_weights(&config, &mut weights, device)?;
        let vocab = file.vocabulary()?;
        let tokenizer = Tokenizer::from_bpe(&vocab)?;
        let tokenizer_config = gguf::tokenizer_config(&file, &vocab);
        Ok(Self {
            rope: Rope::for_config(&config, device),
            config,
            decoder,
            tokenizer: Some(tokenizer),
            tokenizer_config: Some(tokenizer_config),
            source: path.to_path_buf(),
        })
    }

    /// The chat template, when the model has one.
    pub fn chat_template(&self) -> Result<Option<ChatTemplate>, ModelError> {
        match &self.tokenizer_config {
            Some(tc) if !tc["chat_template"].is_null() => {
                Ok(Some(ChatTemplate::from_tokenizer_config(tc)?))
            }
            _ => Ok(None),
        }
    }

    /// What a chat agent needs besides the network: the tokenizer, the chat template and
    /// the ids that end a turn — first the one the template closes an assistant turn with
    /// (what chains stop at, and what SFT and RL teach), then the model's other
    /// end-of-sequence ids. A missing one is an error naming the model.
    pub fn chat_parts(&self) -> Result<(Tokenizer, ChatTemplate, Vec<u32>), ModelError> {
        let tokenizer = self
            .tokenizer
            .clone()
            .ok_or_else(|| ModelError::format(&self.source, "the model has no tokenizer"))?;
        let template = self
            .chat_template()?
            .ok_or_else(|| ModelError::format(&self.source, "the model has no chat template"))?;
        let mut ends = self.eos_ids();
        if let Some(eot) = template.end_of_turn(&tokenizer)? {
            ends.retain(|&id| id != eot);
            ends.insert(0, eot);
        }
        if ends.is_empty() {
            return Err(ModelError::format(
                &self.source,
                "the model has no end-of-turn token: its chat template closes assistant turns \
                 with no special token, and neither config.json's eos_token_id nor \
                 tokenizer_config.json's eos_token names one; add eos_token_id to config.json",
            ));
        }
        Ok((tokenizer, template, ends))
    }

    /// The ids that end generation: the config's `eos_token_id`(s), else the tokenizer's
    /// `eos_token`.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut ids = self.config.eos_ids();
        if let (Some(tok), Some(tc)) = (&self.tokenizer, &self.tokenizer_config) {
            let name = match &tc["eos_token"] {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("content").and_then(Value::as_str),
                _ => None,
            };
            if let Some(id) = name.and_then(|n| tok.token_to_id(n))
                && !ids.contains(&id)
            {
                ids.push(id);
            }
        }
        ids
    }

    /// Writes the weights as a GGUF file at `path` (F32 or F16) with the metadata —
    /// tokenizer, chat template, hyperparameters — and tensor names of `template`, the GGUF
    /// this model was first loaded from: what llama.cpp serves after a policy update.
    pub fn save_gguf(
        &self,
        template: &Path,
        dtype: super::GgufDtype,
        path: &Path,
    ) -> Result<(), ModelError> {
        let template = GgufFile::open(template)?;
        template.write_weights(
            &self.decoder.to_weights(&self.config),
            &self.config,
            dtype,
            path,
        )
    }

    /// Writes a Hugging Face directory: config.json, model.safetensors (f32),
    /// tokenizer.json and tokenizer_config.json (with the chat template).
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        save_weights(dir, &self.decoder, &self.config)?;
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(ModelError::io(p))
        };
        if let Some(tokenizer) = &self.tokenizer {
            write("tokenizer.json", tokenizer.to_json()?)?;
        }
        if let Some(tc) = &self.tokenizer_config {
            write(
                "tokenizer_config.json",
                serde_json::to_string_pretty(tc).expect("json"),
            )?;
        }
        Ok(())
    }
}

/// Writes `decoder`'s weights in Hugging Face layout into `dir`: `config.json` and
/// `model.safetensors` (f32), without a tokenizer — what a server that already has the
/// model needs to load new weights.
pub fn save_weights(dir: &Path, decoder: &Decoder, config: &ModelConfig) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    let mut json = serde_json::to_value(config).expect("config serializes");
    json["torch_dtype"] = "float32".into();
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("json"))
        .map_err(ModelError::io(path))?;
    write_safetensors(&decoder.to_weights(config), &dir.join("model.safetensors"))
}
