//! GGUF files (llama.cpp): metadata, the tokenizer and chat template inside them, and
//! tensors of type F32, F16, BF16, Q4_0, Q4_1 and Q8_0 dequantized to f32. Tensors are
//! renamed to Hugging Face names, and the q/k projections are un-permuted from llama.cpp's
//! interleaved rotary layout back to the rotate-half layout (as transformers does).
//! Format: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

use super::{HostTensor, Weights};
use crate::error::ModelError;
use crate::model::ModelConfig;
use agentfly_core::chat::BpeVocabulary;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Any integer type.
    Int(i64),
    /// f32 or f64.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<MetaValue>),
}

/// A parsed GGUF file: its metadata and its tensors' places.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Metadata by key.
    pub metadata: HashMap<String, MetaValue>,
    tensors: Vec<TensorInfo>,
    data_start: usize,
}

#[derive(Debug, Clone)]
struct TensorInfo {
    name: String,
    /// ggml order: `dims[0]` varies fastest.
    dims: Vec<usize>,
    kind: u32,
    offset: usize,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], ModelError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                ModelError::format(
                    self.path,
                    format!(
                        "truncated GGUF header: needs {n} bytes at offset {}",
                        self.pos
                    ),
                )
            })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }
    fn u32(&mut self) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn string(&mut self) -> Result<String, ModelError> {
        let len = self.u64()? as usize;
        let bytes = self.take(len)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
    fn value(&mut self, kind: u32) -> Result<MetaValue, ModelError> {
        Ok(match kind {
            0 => MetaValue::Int(self.take(1)?[0] as i64),
            1 => MetaValue::Int(self.take(1)?[0] as i8 as i64),
            2 => MetaValue::Int(u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i64),
            3 => MetaValue::Int(i16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i64),
            4 => MetaValue::Int(self.u32()? as i64),
            5 => MetaValue::Int(self.u32()? as i32 as i64),
            6 => MetaValue::Float(f32::from_le_bytes(self.take(4)?.try_into().expect("4")) as f64),
            7 => MetaValue::Bool(self.take(1)?[0] != 0),
            8 => MetaValue::Str(self.string()?),
            9 => {
                let item = self.u32()?;
                let count = self.u64()? as usize;
                if count > self.bytes.len() {
                    return Err(ModelError::format(
                        self.path,
                        format!("array of {count} items is longer than the file"),
                    ));
                }
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(item)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::Int(self.u64()? as i64),
            11 => MetaValue::Int(self.u64()? as i64),
            12 => MetaValue::Float(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            other => {
                return Err(ModelError::format(
                    self.path,
                    format!("unknown metadata value type {other}"),
                ));
            }
        })
    }
}

impl GgufFile {
    /// Reads and parses `path`.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
        let mut r = Reader {
            bytes: &bytes,
            pos: 0,
            path,
        };
        if r.take(4)? != b"GGUF" {
            return Err(ModelError::format(path, "not a GGUF file (no GGUF magic)"));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::format(
                path,
                format!("GGUF version {version} is not supported (2 and 3 are)"),
            ));
        }
        let tensor_count = r.u64()? as usize;
        let kv_count = r.u64()? as usize;
        let mut metadata = HashMap::new();
        for _ in 0..kv_count {
            let key = r.string()?;
            let kind = r.u32()?;
            metadata.insert(key, r.value(kind)?);
        }
        let mut tensors = Vec::with_capacity(tensor_count.min(1 << 16));
        for _ in 0..tensor_count {
            let name = r.string()?;
            let n_dims = r.u32()? as usize;
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(r.u64()? as usize);
            }
            let kind = r.u32()?;
            let offset = r.u64()? as usize;
            tensors.push(TensorInfo {
                name,
                dims,
                kind,
                offset,
            });
        }
        let alignment = match metadata.get("general.alignment") {
            Some(MetaValue::Int(a)) if *a > 0 => *a as usize,
            _ => 32,
        };
        let data_start = r.pos.div_ceil(alignment) * alignment;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
            metadata,
            tensors,
            data_start,
        })
    }

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

    /// Every tensor dequantized to f32, under its Hugging Face name.
    pub fn weights(&self, config: &ModelConfig) -> Result<Weights, ModelError> {
        let mut weights = Weights::new(&self.path);
        for info in &self.tensors {
            let hf = hf_name(&info.name).ok_or_else(|| {
                ModelError::format(
                    &self.path,
                    format!("tensor `{}` has no Hugging Face counterpart", info.name),
                )
            })?;
            let count: usize = info.dims.iter().product();
            let start = self.data_start + info.offset;
            let size = byte_size(info.kind, count)
                .ok_or_else(|| ModelError::format(&self.path, format!("tensor `{}`: ggml type {} is not supported (F32, F16, BF16, Q4_0, Q4_1, Q8_0 are)", info.name, info.kind)))?;
            let bytes = self.bytes.get(start..start + size).ok_or_else(|| {
                ModelError::format(
                    &self.path,
                    format!(
                        "tensor `{}` runs past the end of the file (truncated?)",
                        info.name
                    ),
                )
            })?;
            let mut data = dequantize(info.kind, bytes, count);
            let shape: Vec<usize> = info.dims.iter().rev().copied().collect();
            if hf.ends_with("q_proj.weight") {
                unpermute(&mut data, &shape, config.num_attention_heads);
            } else if hf.ends_with("k_proj.weight") {
                unpermute(&mut data, &shape, config.kv_heads());
            }
            weights.insert(hf, HostTensor::new(shape, data));
        }
        Ok(weights)
    }
}

/// The Hugging Face name of a llama.cpp tensor name.
fn hf_name(name: &str) -> Option<String> {
    let fixed = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let mapped = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{mapped}"))
}

const F32: u32 = 0;
const F16: u32 = 1;
const Q4_0: u32 = 2;
const Q4_1: u32 = 3;
const Q8_0: u32 = 8;
const BF16: u32 = 30;
const BLOCK: usize = 32;

fn byte_size(kind: u32, count: usize) -> Option<usize> {
    let blocks = count.div_ceil(BLOCK);
    match kind {
        F32 => Some(count * 4),
        F16 | BF16 => Some(count * 2),
        Q4_0 => Some(blocks * 18),
        Q4_1 => Some(blocks * 20),
        Q8_0 => Some(blocks * 34),
        _ => None,
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantizes `count` values of ggml type `kind` (ggml's reference formulas).
fn dequantize(kind: u32, bytes: &[u8], count: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(count);
    match kind {
        F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        BF16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        Q8_0 => {
            for block in bytes.chunks_exact(34) {
                let d = f16_at(block, 0);
                out.extend(block[2..].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        Q4_0 | Q4_1 => {
            let (size, offset) = if kind == Q4_0 { (18, 2) } else { (20, 4) };
            for block in bytes.chunks_exact(size) {
                let d = f16_at(block, 0);
                let quants = &block[offset..];
                let mut values = [0f32; BLOCK];
                for (j, &q) in quants.iter().enumerate() {
                    let (lo, hi) = ((q & 0x0f) as f32, (q >> 4) as f32);
                    if kind == Q4_0 {
                        values[j] = (lo - 8.0) * d;
                        values[j + 16] = (hi - 8.0) * d;
                    } else {
                        let m = f16_at(block, 2);
                        values[j] = lo * d + m;
                        values[j + 16] = hi * d + m;
                    }
                }
                out.extend_from_slice(&values);
            }
        }
        _ => unreachable!("byte_size rejects other types"),
    }
    out.truncate(count);
    out
}

/// Undoes llama.cpp's q/k permutation: rows of each head were reordered from
/// `[2, half]` to `[half, 2]` (interleaved rotary pairs); transformers'
/// `reverse_permute_weights` restores `[2, half]`.
fn unpermute(data: &mut [f32], shape: &[usize], heads: usize) {
    let (rows, cols) = (shape[0], shape[1]);
    let half = rows / heads / 2;
    let src = data.to_vec();
    for h in 0..heads {
        for i in 0..half {
            for two in 0..2 {
                // file row index: h, i, two ; HF row index: h, two, i
                let from = (h * half + i) * 2 + two;
                let to = (h * 2 + two) * half + i;
                data[to * cols..(to + 1) * cols]
                    .copy_from_slice(&src[from * cols..(from + 1) * cols]);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_and_q8_0_follow_ggml() {
        let mut q41 = vec![0u8; 20];
        q41[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        q41[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_le_bytes());
        q41[4] = 0x3a; // lo 10, hi 3
        let v = dequantize(Q4_1, &q41, 32);
        assert_eq!((v[0], v[16], v[1]), (4.0, 0.5, -1.0));
        let mut q80 = vec![0u8; 34];
        q80[0..2].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
        q80[2] = (-8i8) as u8;
        q80[3] = 4;
        let v = dequantize(Q8_0, &q80, 32);
        assert_eq!((v[0], v[1], v[2]), (-2.0, 1.0, 0.0));
        let mut q40 = vec![0u8; 18];
        q40[0..2].copy_from_slice(&half::f16::from_f32(2.0).to_le_bytes());
        q40[2] = 0xf0; // lo 0, hi 15
        let v = dequantize(Q4_0, &q40, 32);
        assert_eq!((v[0], v[16]), (-16.0, 14.0));
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(heads, 2, half, cols).swapaxes(1, 2)
        let (heads, half, cols) = (2, 3, 2);
        let rows = heads * 2 * half;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut permuted = vec![0.0; hf.len()];
        for h in 0..heads {
            for two in 0..2 {
                for i in 0..half {
                    let from = (h * 2 + two) * half + i;
                    let to = (h * half + i) * 2 + two;
                    permuted[to * cols..(to + 1) * cols]
                        .copy_from_slice(&hf[from * cols..(from + 1) * cols]);
                }
            }
        }
        unpermute(&mut permuted, &[rows, cols], heads);
        assert_eq!(permuted, hf);
    }
}
