//! A linear projection (`[in, out]` weight, optional bias) and the low-rank adapters that
//! may sit on parts of its output (`model::lora`).

use super::packed::PackedWeight;
use burn::module::{Module, Param};
use burn::tensor::module::linear;
use burn::tensor::{Tensor, TensorData};
use std::sync::Arc;

/// A linear projection stored `[in, out]`, with an optional bias.
#[derive(Module, Debug)]
pub struct Projection {
    /// `[in, out]`.
    pub weight: Param<Tensor<2>>,
    /// `[out]`.
    pub bias: Option<Param<Tensor<1>>>,
    /// Low-rank adapters on parts of the output (`model::lora`); empty without.
    pub lora: Vec<LoraPart>,
    /// The weight packed for decode's small products ([`crate::model::Decoder::pack_for_decode`]);
    /// only a serving copy without adapters has it, and it goes stale if `weight` changes.
    #[module(skip)]
    pub packed: Option<Arc<PackedWeight>>,
    /// Products of at least `BF16_MIN_ROWS` (32) rows in bf16 on AMX ([`super::matmul`]), set by
    /// [`crate::model::Decoder::use_bf16_products`].
    #[module(skip)]
    pub bf16: bool,
}

/// Fewer rows than this (decode) keep their f32 products: packing the weight would cost
/// more than the product.
pub const BF16_MIN_ROWS: usize = 32;

impl Projection {
    /// `x · weight + bias`, plus what the adapters add.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        if let Some(packed) = &self.packed
            && self.lora.is_empty()
            && packed.serves(x.shape().num_elements())
        {
            let bias = self.bias.as_ref().map(|b| b.val());
            return packed_product(packed, x, bias);
        }
        let rows = x.shape().num_elements() / x.dims()[D - 1].max(1);
        let out = product(
            x.clone(),
            self.weight.val(),
            self.bias.as_ref().map(|b| b.val()),
            self.bf16 && rows >= BF16_MIN_ROWS,
        );
        if self.lora.is_empty() {
            out
        } else {
            let delta = self.lora_delta(x, &out);
            out + delta
        }
    }
}

impl Projection {
    /// Replaces each weight `w[i]` (row-major `[in, out]`) by `f(i, w[i])`, keeping the
    /// parameter's id and gradient state, and the packed copy in step.
    pub(crate) fn map_weight_values(&mut self, f: impl Fn(usize, f32) -> f32) {
        let map = |w: Tensor<2>| {
            let (device, dims, grad) = (w.device(), w.dims(), w.is_require_grad());
            let mut values = w.into_data().try_to_vec::<f32>().expect("f32 weights");
            for (i, v) in values.iter_mut().enumerate() {
                *v = f(i, *v);
            }
            // A new tensor: without this it would leave the parameters that learn.
            Tensor::from_data(TensorData::new(values, dims), &device).set_require_grad(grad)
        };
        self.weight = self.weight.clone().map(map);
        if let Some(packed) = &self.packed {
            let bf16 = packed.is_bf16();
            let w = self.weight.val();
            let [k, n] = w.dims();
            let host = w.into_data().try_to_vec::<f32>().expect("f32 weights");
            self.packed = Some(Arc::new(PackedWeight::pack_in_out(&host, k, n, bf16)));
        }
    }
}

/// `x · W (+ bias)` with a packed `W`, on the host: `x`'s last dimension is `W`'s input.
pub(crate) fn packed_product<const D: usize>(
    packed: &PackedWeight,
    x: Tensor<D>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    let device = x.device();
    let mut shape = x.dims();
    let rows = x.shape().num_elements() / packed.k();
    let host = x
        .into_data()
        .try_to_vec::<f32>()
        .expect("packed weights serve f32 inputs");
    let mut out = packed.matmul(&host, rows);
    if let Some(bias) = bias {
        let bias = bias.into_data().try_to_vec::<f32>().expect("an f32 bias");
        for row in out.chunks_mut(packed.n()) {
            for (v, b) in row.iter_mut().zip(&bias) {
                *v += b;
            }
        }
    }
    shape[D - 1] = packed.n();
    Tensor::from_data(TensorData::new(out, shape), &device)
}

/// The adapter of one Hugging Face module inside a fused projection: output columns
/// `start .. start + width` get `scale · x·A·B` added (stored `[in, r]` and `[r, width]`,
/// the transposes of PEFT's `lora_A` and `lora_B`).
#[derive(Module, Debug)]
pub struct LoraPart {
    /// `[in, rank]`.
    pub a: Param<Tensor<2>>,
    /// `[rank, width]`.
    pub b: Param<Tensor<2>>,
    /// First output column.
    pub start: usize,
    /// Output columns.
    pub width: usize,
    /// `alpha / rank`.
    pub scale: f64,
}

/// `x · w + bias`: [`super::matmul`] on the CPU (in bf16 if `bf16`), Burn's `linear`
/// elsewhere (where `bf16` is never set: [`super::bf16::serves`]).
fn product<const D: usize>(
    x: Tensor<D>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    bf16: bool,
) -> Tensor<D> {
    if super::matmul::serves(&x.device()) {
        let out = super::matmul::matmul(x, w, bf16);
        match bias {
            Some(b) => out + b.unsqueeze::<D>(),
            None => out,
        }
    } else {
        linear(x, w, bias)
    }
}

impl Projection {
    /// What the adapters add to this projection's output for input `x`.
    fn lora_delta<const D: usize>(&self, x: Tensor<D>, out: &Tensor<D>) -> Tensor<D> {
        let total = self.weight.dims()[1];
        let mut pieces = Vec::with_capacity(self.lora.len() + 2);
        let mut at = 0;
        for part in &self.lora {
            if part.start > at {
                pieces.push(out.clone().narrow(D - 1, at, part.start - at).zeros_like());
            }
            // The scale on the rank-wide product, not on the projection-wide one.
            let low = product(x.clone(), part.a.val(), None, false) * part.scale;
            pieces.push(product(low, part.b.val(), None, false));
            at = part.start + part.width;
        }
        if at < total {
            pieces.push(out.clone().narrow(D - 1, at, total - at).zeros_like());
        }
        Tensor::cat(pieces, D - 1)
    }

    /// The weight with the adapters folded in, `[in, out]`.
    pub(crate) fn merged_weight(&self) -> Tensor<2> {
        let mut weight = self.weight.val();
        for part in &self.lora {
            let delta = part.a.val().matmul(part.b.val()) * part.scale;
            let [inp, _] = weight.dims();
            let updated = weight.clone().narrow(1, part.start, part.width) + delta;
            weight = weight.slice_assign([0..inp, part.start..part.start + part.width], updated);
        }
        weight
    }
}
