//! Low-rank adapters (LoRA, Hu et al. 2021) as PEFT defines them: a frozen projection `W`
//! plus `(alpha / rank) · B·A`, with `A` `[rank, in]` drawn like PEFT's Kaiming-uniform
//! initialisation and `B` `[out, rank]` zero, so training starts from the base model.
//!
//! Our projections fuse Hugging Face's (q, k, v into `qkv`, gate and up into `gate_up`),
//! so an adapter is a list of [`LoraPart`]s, each covering the output columns of one
//! Hugging Face module. The adapter alone is written and read in PEFT's layout
//! (`adapter_model.safetensors` and `adapter_config.json`: `peft.PeftModel.from_pretrained`
//! loads it); [`Decoder::merged`] folds it into the weights, which is what generation
//! serves and what a saved model holds.

use super::ModelConfig;
use super::decoder::Decoder;
use super::projection::{LoraPart, Projection};
use crate::error::ModelError;
use crate::io::{HostTensor, Weights};
use burn::module::{Module, Param};
use burn::tensor::{Tensor, TensorData};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The Hugging Face modules an adapter may target.
pub const LORA_MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// `[lora]`: train low-rank adapters instead of every weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraConfig {
    /// The adapters' rank `r`.
    pub rank: usize,
    /// The scale's numerator: updates are `(alpha / rank) · B·A`.
    pub alpha: f64,
    /// Hugging Face module names to adapt (see [`LORA_MODULES`]).
    pub targets: Vec<String>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 16,
            alpha: 32.0,
            targets: LORA_MODULES.iter().map(|m| m.to_string()).collect(),
        }
    }
}

impl LoraConfig {
    /// The rank is at least 1 and every target is a known module.
    pub fn validate(&self) -> Result<(), String> {
        if self.rank == 0 {
            return Err("lora.rank: must be at least 1".into());
        }
        if self.targets.is_empty() {
            return Err("lora.targets: name at least one module".into());
        }
        for t in &self.targets {
            if !LORA_MODULES.contains(&t.as_str()) {
                return Err(format!(
                    "lora.targets: `{t}` is not one of {}",
                    LORA_MODULES.join(", ")
                ));
            }
        }
        Ok(())
    }

    fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}

/// Every adaptable projection of block `l`: (its Hugging Face module names with their
/// widths, and the projection).
fn block_modules<'a>(
    decoder: &'a Decoder,
    config: &ModelConfig,
    l: usize,
) -> [(Vec<(&'static str, usize)>, &'a Projection); 4] {
    let (h, i, hd) = (
        config.hidden_size,
        config.intermediate_size,
        config.head_dim(),
    );
    let (heads, kv) = (config.num_attention_heads, config.kv_heads());
    let b = &decoder.blocks[l];
    [
        (
            vec![
                ("q_proj", heads * hd),
                ("k_proj", kv * hd),
                ("v_proj", kv * hd),
            ],
            &b.attention.qkv,
        ),
        (vec![("o_proj", h)], &b.attention.o),
        (vec![("gate_proj", i), ("up_proj", i)], &b.mlp.gate_up),
        (vec![("down_proj", h)], &b.mlp.down),
    ]
}

/// PEFT's name of module `m` of block `l` (`…self_attn.q_proj` or `…mlp.up_proj`).
fn peft_name(l: usize, module: &str) -> String {
    let group = if module.ends_with("_proj")
        && ["gate", "up", "down"].iter().any(|p| module.starts_with(p))
    {
        "mlp"
    } else {
        "self_attn"
    };
    format!("base_model.model.model.layers.{l}.{group}.{module}")
}

impl Decoder {
    /// Freezes every weight and attaches fresh adapters of `lora` (their `B` zero, so the
    /// model computes what it did), drawn from `seed`.
    pub fn with_lora(self, config: &ModelConfig, lora: &LoraConfig, seed: u64) -> Self {
        let device = self.embed.val().device();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        self.attach(config, lora, |_, inp, width| {
            // PEFT: kaiming_uniform_(a=√5) on lora_A [r, in] is U(−1/√in, 1/√in).
            let bound = 1.0 / (inp as f32).sqrt();
            let a: Vec<f32> = (0..inp * lora.rank)
                .map(|_| rng.random_range(-bound..bound))
                .collect();
            let a = Tensor::<2>::from_data(TensorData::new(a, [inp, lora.rank]), &device);
            let b = Tensor::<2>::zeros([lora.rank, width], &device);
            Ok((a, b))
        })
        .expect("fresh adapters cannot fail")
    }

    /// Freezes every weight and attaches the adapters in `weights` (PEFT names and layout,
    /// as [`Decoder::lora_weights`] writes them).
    pub fn with_lora_weights(
        self,
        config: &ModelConfig,
        lora: &LoraConfig,
        weights: &mut Weights,
    ) -> Result<Self, ModelError> {
        let device = self.embed.val().device();
        self.attach(config, lora, |name, inp, width| {
            let a = weights.take(&format!("{name}.lora_A.weight"), &[lora.rank, inp])?;
            let b = weights.take(&format!("{name}.lora_B.weight"), &[width, lora.rank])?;
            let tensor = |t: HostTensor, shape: [usize; 2]| {
                Tensor::<2>::from_data(TensorData::new(t.transposed().data, shape), &device)
            };
            Ok((tensor(a, [inp, lora.rank]), tensor(b, [lora.rank, width])))
        })
    }

    fn attach(
        self,
        config: &ModelConfig,
        lora: &LoraConfig,
        mut make: impl FnMut(&str, usize, usize) -> Result<(Tensor<2>, Tensor<2>), ModelError>,
    ) -> Result<Self, ModelError> {
        let mut decoder = self.no_grad();
        for l in 0..decoder.blocks.len() {
            let mut parts: Vec<Vec<LoraPart>> = Vec::with_capacity(4);
            for (modules, projection) in block_modules(&decoder, config, l) {
                let inp = projection.weight.dims()[0];
                let mut start = 0;
                let mut own = Vec::new();
                for (module, width) in modules {
                    if lora.targets.iter().any(|t| t == module) {
                        let (a, b) = make(&peft_name(l, module), inp, width)?;
                        own.push(LoraPart {
                            a: Param::from_tensor(a).set_require_grad(true),
                            b: Param::from_tensor(b).set_require_grad(true),
                            start,
                            width,
                            scale: lora.scale(),
                        });
                    }
                    start += width;
                }
                parts.push(own);
            }
            let block = &mut decoder.blocks[l];
            let mut parts = parts.into_iter();
            block.attention.qkv.lora = parts.next().expect("four");
            block.attention.o.lora = parts.next().expect("four");
            block.mlp.gate_up.lora = parts.next().expect("four");
            block.mlp.down.lora = parts.next().expect("four");
        }
        Ok(decoder)
    }

    /// Carries adapters?
    pub fn has_lora(&self) -> bool {
        self.blocks.iter().any(|b| {
            [
                &b.attention.qkv,
                &b.attention.o,
                &b.mlp.gate_up,
                &b.mlp.down,
            ]
            .iter()
            .any(|p| !p.lora.is_empty())
        })
    }

    /// The adapters folded into the weights: a plain decoder (without autodiff) that
    /// computes what this one does, for generation and saving.
    pub fn merged(&self) -> Self {
        let mut plain = self.valid();
        for p in plain.projections_mut() {
            if !p.lora.is_empty() {
                p.weight = Param::from_tensor(p.merged_weight());
                p.lora.clear();
                p.packed = None;
            }
        }
        plain
    }

    /// The adapters alone in PEFT's names and layout (`lora_A` `[r, in]`, `lora_B`
    /// `[out, r]`).
    pub fn lora_weights(&self, config: &ModelConfig) -> Weights {
        let mut w = Weights::new("memory");
        for l in 0..self.blocks.len() {
            for (modules, projection) in block_modules(self, config, l) {
                for part in &projection.lora {
                    let (module, _) = modules
                        .iter()
                        .scan(0, |start, &(m, width)| {
                            let here = *start;
                            *start += width;
                            Some((m, here))
                        })
                        .find(|&(_, start)| start == part.start)
                        .expect("a part starts where its module does");
                    let name = peft_name(l, module);
                    let host = |t: Tensor<2>| {
                        let [r, c] = t.dims();
                        HostTensor::new(vec![r, c], t.into_data().try_to_vec::<f32>().expect("f32"))
                            .transposed()
                    };
                    w.insert(format!("{name}.lora_A.weight"), host(part.a.val()));
                    w.insert(format!("{name}.lora_B.weight"), host(part.b.val()));
                }
            }
        }
        w
    }
}

/// The adapters' weights file in a PEFT adapter directory.
pub const ADAPTER_FILE: &str = "adapter_model.safetensors";

/// Writes `decoder`'s adapters into `dir` in PEFT's layout: `adapter_model.safetensors` and
/// `adapter_config.json` (`base`: the base model's path or hub name).
pub fn save_adapter(
    decoder: &Decoder,
    config: &ModelConfig,
    lora: &LoraConfig,
    base: &str,
    dir: &Path,
) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    crate::io::write_safetensors(&decoder.lora_weights(config), &dir.join(ADAPTER_FILE))?;
    let path = dir.join("adapter_config.json");
    let text = serde_json::to_string_pretty(&adapter_config(lora, base)).expect("json");
    std::fs::write(&path, text).map_err(ModelError::io(path))
}

/// The adapter weights of a PEFT adapter directory, for [`Decoder::with_lora_weights`].
pub fn read_adapter(dir: &Path) -> Result<Weights, ModelError> {
    let file = dir.join(ADAPTER_FILE);
    let mut weights = Weights::new(&file);
    crate::io::read_safetensors_file(&file, &mut weights)?;
    Ok(weights)
}

/// PEFT's `adapter_config.json` for `lora` over the base model at `base`.
pub fn adapter_config(lora: &LoraConfig, base: &str) -> serde_json::Value {
    serde_json::json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": lora.targets,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "use_rslora": false,
        "init_lora_weights": true,
    })
}
