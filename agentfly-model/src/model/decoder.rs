//! One decoder for the Llama and Qwen2 families: token embedding, N blocks of
//! (RMSNorm → grouped-query attention with rotary embeddings → residual, RMSNorm → SwiGLU
//! MLP → residual), a final RMSNorm and the output projection (tied to the embedding or
//! not). Reference: transformers' `modeling_llama.py` / `modeling_qwen2.py`.

use super::attention::{self, causal_attention};
use super::fused_qkv;
use super::packed::PackedWeight;
use super::projection::{Projection, packed_product};
use super::window_attention::Window;
use super::{KvCache, ModelConfig, Rope};
use crate::error::ModelError;
use crate::io::{HostTensor, Weights};
use burn::module::{Module, Param};
use burn::tensor::activation::silu;
use burn::tensor::module::{embedding, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::sync::Arc;

/// Rows from which the tied vocabulary projection on the CPU is one product reading the
/// embedding's transpose in place. Fewer rows (decode steps without packed weights) keep
/// `embed · hiddenᵀ`, the path measured for them (see the arm below).
const TIED_PRODUCT_MIN_ROWS: usize = 32;

/// RMSNorm with a learned scale.
#[derive(Module, Debug)]
pub struct RmsNorm {
    /// `[hidden]`.
    pub weight: Param<Tensor<1>>,
    /// Epsilon.
    pub eps: f64,
}

impl RmsNorm {
    pub(super) fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let variance = x.clone().powi_scalar(2).mean_dim(2);
        let normed = x * (variance + self.eps).sqrt().recip();
        normed * self.weight.val().unsqueeze_dims::<3>(&[0, 1])
    }
}

/// Grouped-query self-attention. The q, k and v projections are one matrix
/// `[hidden, (heads + 2 kv_heads) * head_dim]`: one wide matmul instead of three narrow
/// ones. Loading and saving split and join them in Hugging Face naming.
#[derive(Module, Debug)]
pub struct Attention {
    /// Query, key and value projections, side by side.
    pub qkv: Projection,
    /// Output projection.
    pub o: Projection,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
}

/// The SwiGLU MLP, `down(silu(gate(x)) * up(x))`, with gate and up as one matrix
/// `[hidden, 2 * intermediate]`.
#[derive(Module, Debug)]
pub struct Mlp {
    /// Gate and up projections, side by side.
    pub gate_up: Projection,
    /// Down projection.
    pub down: Projection,
    /// Width of each half of `gate_up`.
    pub intermediate: usize,
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
    /// The output projection packed for decode ([`Decoder::pack_for_decode`]).
    #[module(skip)]
    pub packed_head: Option<Arc<PackedWeight>>,
}

/// `[batch, len]` rotary positions `start..start + len` in every row.
pub(super) fn positions(start: usize, len: usize, batch: usize, device: &Device) -> Tensor<2, Int> {
    Tensor::<1, Int>::arange(start as i64..(start + len) as i64, device)
        .unsqueeze_dim::<2>(0)
        .expand([batch, len])
}

/// What one forward pass needs besides the ids: where each token sits and which keys each
/// row sees.
#[derive(Debug, Clone)]
pub struct ForwardInput {
    /// `[batch, len]` token ids.
    pub ids: Tensor<2, Int>,
    /// `[batch, len]` rotary positions.
    pub positions: Tensor<2, Int>,
    /// Each row's [`Window`] of the cache's keys (padded prompts, turns after cached
    /// prefixes, decode steps); `None` for a plain causal pass over all the keys.
    pub windows: Option<Vec<Window>>,
}

fn param<const D: usize>(t: HostTensor, shape: [usize; D], device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(t.data, shape), device))
}

/// Hugging Face projections fused into one: each `(name, out)` is a `[out, in]` matrix
/// (and `[out]` bias) in the file.
type Parts = [(String, usize)];

fn fused(
    w: &mut Weights,
    parts: &Parts,
    inp: usize,
    bias: bool,
    device: &Device,
) -> Result<Projection, ModelError> {
    let mut rows = Vec::new();
    let mut biases = Vec::new();
    for (name, out) in parts {
        rows.extend(w.take(&format!("{name}.weight"), &[*out, inp])?.data);
        if bias {
            biases.extend(w.take(&format!("{name}.bias"), &[*out])?.data);
        }
    }
    let total: usize = parts.iter().map(|p| p.1).sum();
    let weight = HostTensor::new(vec![total, inp], rows).transposed();
    Ok(Projection {
        weight: param(weight, [inp, total], device),
        bias: bias.then(|| param(HostTensor::new(vec![total], biases), [total], device)),
        lora: Vec::new(),
        packed: None,
        bf16: false,
    })
}

fn host2(t: Tensor<2>) -> HostTensor {
    let [a, b] = t.dims();
    HostTensor::new(
        vec![a, b],
        t.into_data().try_to_vec::<f32>().expect("f32 weights"),
    )
}

fn host1(t: Tensor<1>) -> HostTensor {
    let [a] = t.dims();
    HostTensor::new(
        vec![a],
        t.into_data().try_to_vec::<f32>().expect("f32 weights"),
    )
}

/// The inverse of [`fused`]: one `[in, sum(out)]` projection back into its parts.
fn unfuse(w: &mut Weights, parts: &Parts, p: &Projection) {
    let rows = host2(p.weight.val()).transposed();
    let cols = rows.shape[1];
    let bias = p.bias.as_ref().map(|b| host1(b.val()).data);
    let mut start = 0;
    for (name, out) in parts {
        let data = rows.data[start * cols..(start + out) * cols].to_vec();
        w.insert(
            format!("{name}.weight"),
            HostTensor::new(vec![*out, cols], data),
        );
        if let Some(bias) = &bias {
            w.insert(
                format!("{name}.bias"),
                HostTensor::new(vec![*out], bias[start..start + out].to_vec()),
            );
        }
        start += out;
    }
}

/// The Hugging Face parts of block `l`'s fused projections: (qkv, o, gate_up, down).
fn parts(config: &ModelConfig, l: usize) -> [Vec<(String, usize)>; 4] {
    let (h, i, hd) = (
        config.hidden_size,
        config.intermediate_size,
        config.head_dim(),
    );
    let (heads, kv) = (config.num_attention_heads, config.kv_heads());
    let a = |n: &str, out: usize| (format!("model.layers.{l}.self_attn.{n}_proj"), out);
    let m = |n: &str, out: usize| (format!("model.layers.{l}.mlp.{n}_proj"), out);
    [
        vec![a("q", heads * hd), a("k", kv * hd), a("v", kv * hd)],
        vec![a("o", h)],
        vec![m("gate", i), m("up", i)],
        vec![m("down", h)],
    ]
}

impl Decoder {
    /// Builds the decoder from Hugging Face-named host weights, checking every shape.
    pub fn from_weights(
        config: &ModelConfig,
        weights: &mut Weights,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let (h, v) = (config.hidden_size, config.vocab_size);
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
        let attn_width = config.num_attention_heads * config.head_dim();
        let mut blocks = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let [qkv, o, gate_up, down] = parts(config, l);
            blocks.push(Block {
                input_norm: norm(weights, &format!("model.layers.{l}.input_layernorm.weight"))?,
                attention: Attention {
                    qkv: fused(weights, &qkv, h, config.qkv_bias(), device)?,
                    o: fused(weights, &o, attn_width, config.o_bias(), device)?,
                    heads: config.num_attention_heads,
                    kv_heads: config.kv_heads(),
                    head_dim: config.head_dim(),
                },
                post_attention_norm: norm(
                    weights,
                    &format!("model.layers.{l}.post_attention_layernorm.weight"),
                )?,
                mlp: Mlp {
                    gate_up: fused(weights, &gate_up, h, false, device)?,
                    down: fused(weights, &down, config.intermediate_size, false, device)?,
                    intermediate: config.intermediate_size,
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
            packed_head: None,
        })
    }

    /// Every block's projections (q/k/v, o, gate/up, down), in order.
    pub(crate) fn projections_mut(&mut self) -> impl Iterator<Item = &mut Projection> {
        self.blocks.iter_mut().flat_map(|b| {
            [
                &mut b.attention.qkv,
                &mut b.attention.o,
                &mut b.mlp.gate_up,
                &mut b.mlp.down,
            ]
        })
    }

    /// Runs the projections' products of many rows (prefill, training, scoring) in bf16
    /// with f32 sums on Intel AMX ([`crate::model::bf16`]), or back in f32. Answers whether
    /// bf16 is on: only a flex (CPU) model on a CPU and OS with AMX can have it. A model
    /// about to be trained from a checkpoint's weights should have them dithered first
    /// ([`Decoder::dither_for_bf16`]).
    pub fn use_bf16_products(&mut self, on: bool) -> bool {
        let on = on && crate::model::bf16::serves(&self.embed.device());
        for p in self.projections_mut() {
            p.bf16 = on;
        }
        on
    }

    /// Moves each projection weight by a uniform random fraction (−½ to ½, from `seed`) of
    /// its bf16 spacing, once, before bf16 training starts ([`Decoder::use_bf16_products`]).
    /// A bf16 product rounds its f32 master weights afresh each time; it follows small
    /// updates on average only when the weights sit anywhere within their bf16 cells, so
    /// that an update of a fraction of a cell moves that fraction of the weights by one
    /// bf16 step. A quantized checkpoint's weights do not: 11.7% of the Q4_1 GGUF's lie
    /// exactly on a tie between two bf16 values, which any update tips all at once along
    /// its own direction (BENCHMARKS.md, "bf16 on AMX"); rounded to bf16 values, all would
    /// wait for half a step and then move together. Each weight moves at most half a bf16
    /// step — what a bf16 product rounds away anyway.
    pub fn dither_for_bf16(&mut self, seed: u64) {
        for (p, projection) in self.projections_mut().enumerate() {
            let stream = seed ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            projection.map_weight_values(|i, v| {
                crate::model::bf16::dither(v, crate::model::bf16::uniform(stream, i as u64))
            });
        }
    }

    /// Packs every projection and the output projection for decode's small products
    /// ([`PackedWeight`]): a serving copy's weights, held twice from then on. With bf16
    /// products on ([`Decoder::use_bf16_products`]) they are packed in bf16 for AMX, which
    /// then serves every product of the copy, prefill and decode, the output projection's
    /// too; otherwise in f32 for the AVX-512 kernel's products of a few rows. Does nothing
    /// off the CPU or under autodiff (which a device's `==` ignores), on a CPU without the
    /// fast kernel, or with adapters not merged; a weight changed afterwards needs packing
    /// again.
    pub fn pack_for_decode(&mut self) {
        if !crate::model::packed::fast_kernel_available()
            || !super::decode_attention::serves(&self.embed.device())
        {
            return;
        }
        let host = |t: Tensor<2>| {
            let [a, b] = t.dims();
            let v = t.into_data().try_to_vec::<f32>().ok()?;
            Some((v, a, b))
        };
        let bf16 = self.projections_mut().any(|p| p.bf16);
        for p in self.projections_mut() {
            if p.lora.is_empty()
                && let Some((w, k, n)) = host(p.weight.val())
            {
                p.packed = Some(Arc::new(PackedWeight::pack_in_out(&w, k, n, bf16)));
            }
        }
        self.packed_head = match &self.lm_head {
            Some(head) => {
                host(head.val()).map(|(w, k, n)| PackedWeight::pack_in_out(&w, k, n, bf16))
            }
            None => {
                host(self.embed.val()).map(|(w, n, k)| PackedWeight::pack_out_in(&w, n, k, bf16))
            }
        }
        .map(Arc::new);
    }

    /// The weights back on the host, in Hugging Face naming and layout.
    pub fn to_weights(&self, config: &ModelConfig) -> Weights {
        let mut w = Weights::new("memory");
        w.insert("model.embed_tokens.weight", host2(self.embed.val()));
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
            let [qkv, o, gate_up, down] = parts(config, l);
            unfuse(&mut w, &qkv, &b.attention.qkv);
            unfuse(&mut w, &o, &b.attention.o);
            unfuse(&mut w, &gate_up, &b.mlp.gate_up);
            unfuse(&mut w, &down, &b.mlp.down);
        }
        w.insert("model.norm.weight", host1(self.norm.weight.val()));
        if let Some(head) = &self.lm_head {
            w.insert("lm_head.weight", host2(head.val()).transposed());
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
                input.windows.as_deref(),
                cache.as_deref_mut(),
                l,
            );
            x = block.feed_forward(residual + attended);
        }
        self.norm.forward(x)
    }

    /// The final hidden states of one plain causal pass over `ids` `[batch, len]` (no
    /// padding, no cache).
    pub fn causal_hidden(&self, ids: Tensor<2, Int>, rope: &Rope) -> Tensor<3> {
        let [batch, len] = ids.dims();
        let positions = positions(0, len, batch, &ids.device());
        self.hidden(
            ForwardInput {
                ids,
                positions,
                windows: None,
            },
            rope,
            None,
        )
    }

    /// Logits `[batch, len, vocab]` of hidden states.
    pub fn logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        if let Some(packed) = &self.packed_head
            && packed.serves(hidden.shape().num_elements())
        {
            return packed_product(packed, hidden, None);
        }
        match &self.lm_head {
            Some(head) => linear(hidden, head.val(), None),
            // Tied, on the CPU: `hidden · embedᵀ` in one product that reads the transpose
            // in place, its output already `[rows, vocab]`.
            None if super::matmul::serves(&hidden.device())
                && hidden.shape().num_elements() / hidden.dims()[2] >= TIED_PRODUCT_MIN_ROWS =>
            {
                super::matmul::matmul(hidden, self.embed.val().transpose(), false)
            }
            None => {
                // Tied: `embed @ hidden^T`, transposing the small result rather than the
                // [vocab, hidden] matrix (a strided 49152×576 operand made flex's
                // batch-1 matmul 30× slower).
                let [batch, len, width] = hidden.dims();
                let flat = hidden.reshape([batch * len, width]);
                let vocab = self.embed.dims()[0];
                self.embed
                    .val()
                    .matmul(flat.transpose())
                    .transpose()
                    .reshape([batch, len, vocab])
            }
        }
    }

    /// One plain causal forward pass over `ids` [batch, len] (no padding, no cache).
    pub fn forward(&self, ids: Tensor<2, Int>, rope: &Rope) -> Tensor<3> {
        self.logits(self.causal_hidden(ids, rope))
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
        windows: Option<&[Window]>,
        cache: Option<&mut KvCache>,
        layer: usize,
    ) -> Tensor<3> {
        let [batch, len, _] = x.dims();
        let hd = self.head_dim;
        if cache.is_none() && windows.is_none() && len > 1 && fused_qkv::serves(&x.device()) {
            // The plain causal pass on the CPU: split, rotation, attention and the heads'
            // transpose in one operation.
            let table = |t: &Tensor<4>| t.clone().reshape([batch, len, hd]);
            let qkv = self.qkv.forward(x);
            let out = fused_qkv::causal(qkv, table(cos), table(sin), self.heads, self.kv_heads);
            return self.o.forward(out);
        }
        let (q, k, v) = self.project(x, rope, cos, sin);
        let group = self.heads / self.kv_heads;
        let packed = cache
            .as_deref()
            .and_then(KvCache::packed)
            .map(<[usize]>::to_vec);
        let (k, v, valid) = match cache {
            Some(cache) => cache.append(layer, k, v),
            None => {
                let keys = k.dims()[2];
                (k, v, keys)
            }
        };
        let out = match windows {
            // The cache's whole buffers, each row seeing its window of them: no copy.
            Some(windows) => attention::attend(q, k, v, group, windows, packed.as_deref()),
            // A plain causal pass over the keys written so far (scoring, training).
            None => {
                let (k, v) = (k.narrow(2, 0, valid), v.narrow(2, 0, valid));
                if len > 1 && valid == len {
                    causal_attention(q, k, v, group, 0, None)
                } else {
                    let options = AttentionModuleOptions {
                        scale: None,
                        softcap: None,
                        is_causal: true,
                    };
                    burn::tensor::module::attention(q, k, v, None, None, options)
                }
            }
        };
        self.output(out)
    }

    /// The queries `[batch, heads, len, d]`, keys and values `[batch, kv_heads, len, d]`
    /// of `x` `[batch, len, hidden]`, rotated by `cos` and `sin`.
    pub(super) fn project(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        cos: &Tensor<4>,
        sin: &Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let [batch, len, _] = x.dims();
        let hd = self.head_dim;
        let (q_width, kv_width) = (self.heads * hd, self.kv_heads * hd);
        let mut qkv = self.qkv.forward(x);
        let served = super::decode_attention::all_served(&[&qkv])
            && super::decode_attention::all_served(&[cos, sin]);
        if len > 1 && served && cos.dims() == [batch, 1, len, hd] {
            // A pass with a cache on the CPU: split and rotation in one operation.
            let table = |t: &Tensor<4>| t.clone().reshape([batch, len, hd]);
            let (heads, kv) = (self.heads, self.kv_heads);
            let all = fused_qkv::split_rotated(qkv, table(cos), table(sin), heads, kv);
            let part = |from: usize, n: usize| all.clone().narrow(1, from, n);
            return (part(0, heads), part(heads, kv), part(heads + kv, kv));
        }
        let step = len == 1 && served;
        if step {
            qkv = super::rope::rotate_step(qkv, cos, sin, self.heads + self.kv_heads);
        }
        let split = |start: usize, heads: usize| {
            let t = qkv.clone().narrow(2, start, heads * hd);
            if len == 1 {
                // [batch, 1, heads * d] is [batch, heads, 1, d] in memory: no copy.
                t.reshape([batch, heads, 1, hd])
            } else {
                t.reshape([batch, len, heads, hd]).swap_dims(1, 2)
            }
        };
        let (q, k) = (split(0, self.heads), split(q_width, self.kv_heads));
        let (q, k) = if step {
            (q, k)
        } else {
            (rope.apply(q, cos, sin), rope.apply(k, cos, sin))
        };
        (q, k, split(q_width + kv_width, self.kv_heads))
    }

    /// The output projection of the heads' results `[batch, heads, len, d]`.
    pub(super) fn output(&self, out: Tensor<4>) -> Tensor<3> {
        let [batch, _, len, _] = out.dims();
        let width = self.heads * self.head_dim;
        let out = if len == 1 {
            out.reshape([batch, 1, width])
        } else if super::decode_attention::all_served(&[&out]) {
            fused_qkv::merge_heads(out)
        } else {
            out.swap_dims(1, 2).reshape([batch, len, width])
        };
        self.o.forward(out)
    }
}

impl Block {
    /// The block's second half: `x` plus the MLP of its normed self.
    pub(super) fn feed_forward(&self, x: Tensor<3>) -> Tensor<3> {
        let normed = self.post_attention_norm.forward(x.clone());
        x + self.mlp.forward(normed)
    }
}

impl Mlp {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let both = self.gate_up.forward(x);
        if super::swiglu::serves(&both.device()) {
            return self.down.forward(super::swiglu::swiglu(both));
        }
        let gate = both.clone().narrow(2, 0, self.intermediate);
        let up = both.narrow(2, self.intermediate, self.intermediate);
        self.down.forward(silu(gate) * up)
    }
}
