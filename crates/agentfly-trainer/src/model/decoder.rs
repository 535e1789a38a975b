//! One decoder for the Llama and Qwen2 families: token embedding, N blocks of
//! (RMSNorm → grouped-query attention with rotary embeddings → residual, RMSNorm → SwiGLU
//! MLP → residual), a final RMSNorm and the output projection (tied to the embedding or
//! not). Reference: transformers' `modeling_llama.py` / `modeling_qwen2.py`.

use super::{KvCache, ModelConfig, Rope};
use crate::error::ModelError;
use crate::io::{HostTensor, Weights};
use burn::module::{Module, Param};
use burn::tensor::activation::silu;
use burn::tensor::module::{attention, embedding, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

/// A linear projection stored `[in, out]`, with an optional bias.
#[derive(Module, Debug)]
pub struct Projection {
    /// `[in, out]`.
    pub weight: Param<Tensor<2>>,
    /// `[out]`.
    pub bias: Option<Param<Tensor<1>>>,
}

impl Projection {
    fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        linear(x, self.weight.val(), self.bias.as_ref().map(|b| b.val()))
    }
}

/// RMSNorm with a learned scale.
#[derive(Module, Debug)]
pub struct RmsNorm {
    /// `[hidden]`.
    pub weight: Param<Tensor<1>>,
    /// Epsilon.
    pub eps: f64,
}

impl RmsNorm {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let variance = x.clone().powi_scalar(2).mean_dim(2);
        let normed = x * (variance + self.eps).sqrt().recip();
        normed * self.weight.val().unsqueeze_dims::<3>(&[0, 1])
    }
}

/// Grouped-query self-attention.
#[derive(Module, Debug)]
pub struct Attention {
    /// Query projection.
    pub q: Projection,
    /// Key projection.
    pub k: Projection,
    /// Value projection.
    pub v: Projection,
    /// Output projection.
    pub o: Projection,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
}

/// The SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Gate projection.
    pub gate: Projection,
    /// Up projection.
    pub up: Projection,
    /// Down projection.
    pub down: Projection,
}

/// One decoder block.
#[derive(Module, Debug)]
pub struct Block {
    /// Norm before attention.
    pub input_norm: RmsNorm,
    /// Self-attention.
    pub attention: Attention,
    /// Norm before the MLP.
    pub post_attention_norm: RmsNorm,
    /// The MLP.
    pub mlp: Mlp,
}

/// The decoder language model.
#[derive(Module, Debug)]
pub struct Decoder {
    /// `[vocab, hidden]`.
    pub embed: Param<Tensor<2>>,
    /// The blocks.
    pub blocks: Vec<Block>,
    /// The final norm.
    pub norm: RmsNorm,
    /// `[hidden, vocab]`; `None` when tied to the embedding.
    pub lm_head: Option<Param<Tensor<2>>>,
}

/// What one forward pass needs besides the ids: where each token sits and which keys are
/// padding.
#[derive(Debug, Clone)]
pub struct ForwardInput {
    /// `[batch, len]` token ids.
    pub ids: Tensor<2, Int>,
    /// `[batch, len]` rotary positions.
    pub positions: Tensor<2, Int>,
    /// `[batch, heads=1, len, keys]` true where a query must not see a key; `None` for a
    /// plain causal pass without padding or cache.
    pub mask: Option<Tensor<4, Bool>>,
}

fn param<const D: usize>(t: HostTensor, shape: [usize; D], device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(t.data, shape), device))
}

impl Decoder {
    /// Builds the decoder from Hugging Face-named host weights, checking every shape.
    pub fn from_weights(
        config: &ModelConfig,
        weights: &mut Weights,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let (h, v, i) = (
            config.hidden_size,
            config.vocab_size,
            config.intermediate_size,
        );
        let (heads, kv_heads, hd) = (
            config.num_attention_heads,
            config.kv_heads(),
            config.head_dim(),
        );
        let proj = |w: &mut Weights,
                    name: &str,
                    out: usize,
                    inp: usize,
                    bias: bool|
         -> Result<Projection, ModelError> {
            let weight = w.take(&format!("{name}.weight"), &[out, inp])?.transposed();
            let bias = if bias {
                Some(param(
                    w.take(&format!("{name}.bias"), &[out])?,
                    [out],
                    device,
                ))
            } else {
                None
            };
            Ok(Projection {
                weight: param(weight, [inp, out], device),
                bias,
            })
        };
        let norm = |w: &mut Weights, name: &str| -> Result<RmsNorm, ModelError> {
            Ok(RmsNorm {
                weight: param(w.take(name, &[h])?, [h], device),
                eps: config.rms_norm_eps,
            })
        };
        let embed = param(
            weights.take("model.embed_tokens.weight", &[v, h])?,
            [v, h],
            device,
        );
        let mut blocks = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}");
            blocks.push(Block {
                input_norm: norm(weights, &format!("{p}.input_layernorm.weight"))?,
                attention: Attention {
                    q: proj(
                        weights,
                        &format!("{p}.self_attn.q_proj"),
                        heads * hd,
                        h,
                        config.qkv_bias(),
                    )?,
                    k: proj(
                        weights,
                        &format!("{p}.self_attn.k_proj"),
                        kv_heads * hd,
                        h,
                        config.qkv_bias(),
                    )?,
                    v: proj(
                        weights,
                        &format!("{p}.self_attn.v_proj"),
                        kv_heads * hd,
                        h,
                        config.qkv_bias(),
                    )?,
                    o: proj(
                        weights,
                        &format!("{p}.self_attn.o_proj"),
                        h,
                        heads * hd,
                        config.o_bias(),
                    )?,
                    heads,
                    kv_heads,
                    head_dim: hd,
                },
                post_attention_norm: norm(
                    weights,
                    &format!("{p}.post_attention_layernorm.weight"),
                )?,
                mlp: Mlp {
                    gate: proj(weights, &format!("{p}.mlp.gate_proj"), i, h, false)?,
                    up: proj(weights, &format!("{p}.mlp.up_proj"), i, h, false)?,
                    down: proj(weights, &format!("{p}.mlp.down_proj"), h, i, false)?,
                },
            });
        }
        let final_norm = norm(weights, "model.norm.weight")?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            let w = weights.take("lm_head.weight", &[v, h])?.transposed();
            Some(param(w, [h, v], device))
        };
        Ok(Self {
            embed,
            blocks,
            norm: final_norm,
            lm_head,
        })
    }

    /// The weights back on the host, in Hugging Face naming and layout.
    pub fn to_weights(&self, config: &ModelConfig) -> Weights {
        let mut w = Weights::new("memory");
        let host = |t: Tensor<2>| {
            let [a, b] = t.dims();
            HostTensor::new(
                vec![a, b],
                t.into_data().try_to_vec::<f32>().expect("f32 weights"),
            )
        };
        let host1 = |t: Tensor<1>| {
            let [a] = t.dims();
            HostTensor::new(
                vec![a],
                t.into_data().try_to_vec::<f32>().expect("f32 weights"),
            )
        };
        let put_proj = |w: &mut Weights, name: &str, p: &Projection| {
            w.insert(format!("{name}.weight"), host(p.weight.val()).transposed());
            if let Some(b) = &p.bias {
                w.insert(format!("{name}.bias"), host1(b.val()));
            }
        };
        w.insert("model.embed_tokens.weight", host(self.embed.val()));
        for (l, b) in self.blocks.iter().enumerate() {
            let p = format!("model.layers.{l}");
            w.insert(
                format!("{p}.input_layernorm.weight"),
                host1(b.input_norm.weight.val()),
            );
            w.insert(
                format!("{p}.post_attention_layernorm.weight"),
                host1(b.post_attention_norm.weight.val()),
            );
            put_proj(&mut w, &format!("{p}.self_attn.q_proj"), &b.attention.q);
            put_proj(&mut w, &format!("{p}.self_attn.k_proj"), &b.attention.k);
            put_proj(&mut w, &format!("{p}.self_attn.v_proj"), &b.attention.v);
            put_proj(&mut w, &format!("{p}.self_attn.o_proj"), &b.attention.o);
            put_proj(&mut w, &format!("{p}.mlp.gate_proj"), &b.mlp.gate);
            put_proj(&mut w, &format!("{p}.mlp.up_proj"), &b.mlp.up);
            put_proj(&mut w, &format!("{p}.mlp.down_proj"), &b.mlp.down);
        }
        w.insert("model.norm.weight", host1(self.norm.weight.val()));
        match &self.lm_head {
            Some(head) => w.insert("lm_head.weight", host(head.val()).transposed()),
            None if !config.tie_word_embeddings => {
                w.insert("lm_head.weight", host(self.embed.val()));
            }
            None => {}
        }
        w
    }

    /// The final hidden states `[batch, len, hidden]`, appending to `cache` when given.
    pub fn hidden(
        &self,
        input: ForwardInput,
        rope: &Rope,
        mut cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let (cos, sin) = rope.tables(input.positions);
        let mut x = embedding(self.embed.val(), input.ids);
        for (l, block) in self.blocks.iter().enumerate() {
            let residual = x.clone();
            let normed = block.input_norm.forward(x);
            let attended = block.attention.forward(
                normed,
                rope,
                &cos,
                &sin,
                input.mask.clone(),
                cache.as_deref_mut(),
                l,
            );
            x = residual + attended;
            let residual = x.clone();
            let normed = block.post_attention_norm.forward(x);
            x = residual + block.mlp.forward(normed);
        }
        self.norm.forward(x)
    }

    /// Logits `[batch, len, vocab]` of hidden states.
    pub fn logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        match &self.lm_head {
            Some(head) => linear(hidden, head.val(), None),
            None => linear(hidden, self.embed.val().transpose(), None),
        }
    }

    /// One plain causal forward pass over `ids` [batch, len] (no padding, no cache).
    pub fn forward(&self, ids: Tensor<2, Int>, rope: &Rope) -> Tensor<3> {
        let [batch, len] = ids.dims();
        let device = ids.device();
        let positions = Tensor::<1, Int>::arange(0..len as i64, &device)
            .unsqueeze_dim::<2>(0)
            .expand([batch, len]);
        let hidden = self.hidden(
            ForwardInput {
                ids,
                positions,
                mask: None,
            },
            rope,
            None,
        );
        self.logits(hidden)
    }
}

impl Attention {
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        cos: &Tensor<4>,
        sin: &Tensor<4>,
        mask: Option<Tensor<4, Bool>>,
        cache: Option<&mut KvCache>,
        layer: usize,
    ) -> Tensor<3> {
        let [batch, len, _] = x.dims();
        let split = |t: Tensor<3>, heads: usize| {
            t.reshape([batch, len, heads, self.head_dim])
                .swap_dims(1, 2)
        };
        let q = rope.apply(split(self.q.forward(x.clone()), self.heads), cos, sin);
        let k = rope.apply(split(self.k.forward(x.clone()), self.kv_heads), cos, sin);
        let v = split(self.v.forward(x), self.kv_heads);
        let (k, v) = match cache {
            Some(cache) => cache.append(layer, k, v),
            None => (k, v),
        };
        let keys = k.dims()[2];
        let group = self.heads / self.kv_heads;
        let repeat = |t: Tensor<4>| {
            if group == 1 {
                t
            } else {
                t.unsqueeze_dim::<5>(2)
                    .expand([batch, self.kv_heads, group, keys, self.head_dim])
                    .reshape([batch, self.heads, keys, self.head_dim])
            }
        };
        let (k, v) = (repeat(k), repeat(v));
        let is_causal = mask.is_none();
        let mask = mask.map(|m| m.expand([batch, self.heads, len, keys]));
        let out = attention(
            q,
            k,
            v,
            mask,
            None,
            AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal,
            },
        );
        let out = out
            .swap_dims(1, 2)
            .reshape([batch, len, self.heads * self.head_dim]);
        self.o.forward(out)
    }
}

impl Mlp {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let gated = silu(self.gate.forward(x.clone())) * self.up.forward(x);
        self.down.forward(gated)
    }
}
