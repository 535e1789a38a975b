//! Rotary position embeddings in the Hugging Face form: the two halves of each head are
//! rotated (`rotate_half`), not interleaved pairs as in Burn's `RotaryEncoding`. Tables are
//! computed in f32 exactly as transformers computes them.

use super::fused_qkv::rotate_half;
use super::vector::contiguous;
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Cosine and sine tables for every position.
#[derive(Debug, Clone)]
pub struct Rope {
    cos: Tensor<2>,
    sin: Tensor<2>,
    head_dim: usize,
}

impl Rope {
    /// Tables for `max_positions` positions of heads `head_dim` wide, base `theta`.
    pub fn new(head_dim: usize, max_positions: usize, theta: f64, device: &Device) -> Self {
        let half = head_dim / 2;
        let theta = theta as f32;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(max_positions * head_dim);
        let mut sin = Vec::with_capacity(max_positions * head_dim);
        for pos in 0..max_positions {
            for _ in 0..2 {
                for f in &inv_freq {
                    let angle = pos as f32 * f;
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
        let table =
            |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [max_positions, head_dim]), device);
        Self {
            cos: table(cos),
            sin: table(sin),
            head_dim,
        }
    }

    /// Tables for a model: its head width, `max_position_embeddings` and rotary base.
    pub fn for_config(config: &super::ModelConfig, device: &Device) -> Self {
        Self::new(
            config.head_dim(),
            config.max_position_embeddings,
            config.rope_theta(),
            device,
        )
    }

    /// The largest position + 1 the tables cover.
    pub fn max_positions(&self) -> usize {
        self.cos.dims()[0]
    }

    /// The (cos, sin) rows for `positions` [batch, len], shaped [batch, 1, len, head_dim].
    pub fn tables(&self, positions: Tensor<2, Int>) -> (Tensor<4>, Tensor<4>) {
        let [batch, len] = positions.dims();
        let flat = positions.reshape([batch * len]);
        let pick = |t: &Tensor<2>| {
            t.clone()
                .select(0, flat.clone())
                .reshape([batch, 1, len, self.head_dim])
        };
        (pick(&self.cos), pick(&self.sin))
    }

    /// Rotates `x` [batch, heads, len, head_dim] by the tables from [`tables`](Self::tables).
    pub fn apply(&self, x: Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>) -> Tensor<4> {
        let half = self.head_dim / 2;
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * cos.clone() + rotated * sin.clone()
    }
}

/// A decode step's queries and keys rotated in place: the first `heads` heads of each row
/// of `qkv` `[batch, 1, width]` (the queries', then the keys', before the values), head `h`
/// of row `b` by `cos` and `sin` `[batch, 1, 1, d]`'s row `b`. The numbers
/// [`Rope::apply`] gives, in one operation on the flex (CPU) device where `apply`, on the
/// split heads, takes seven a tensor ([`super::decode_attention::serves`] says when).
pub(super) fn rotate_step(
    qkv: Tensor<3>,
    cos: &Tensor<4>,
    sin: &Tensor<4>,
    heads: usize,
) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as RotateStep>::rotate_step(
        qkv.into_dispatch(),
        cos.clone().into_dispatch(),
        sin.clone().into_dispatch(),
        heads,
    ))
}

/// The extension behind [`rotate_step`].
#[backend_extension(Flex)]
trait RotateStep: Backend {
    /// See [`rotate_step`].
    fn rotate_step(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
    ) -> FloatTensor<Self>;
}

impl RotateStep for Flex {
    fn rotate_step(qkv: FlexTensor, cos: FlexTensor, sin: FlexTensor, heads: usize) -> FlexTensor {
        let mut qkv = contiguous(qkv);
        let (cos, sin) = (contiguous(cos), contiguous(sin));
        let dims = qkv.layout().shape().to_vec();
        let [batch, 1, width] = dims[..] else {
            panic!("one position a row: [batch, 1, width], got {dims:?}")
        };
        let d = cos.layout().shape().to_vec()[3];
        assert_eq!(
            cos.layout().shape().num_elements(),
            batch * d,
            "a table row a row"
        );
        assert!(
            heads * d <= width,
            "{heads} heads of {d} in a row of {width}"
        );
        let (cos, sin) = (cos.storage::<f32>(), sin.storage::<f32>());
        let mut x = vec![0.0f32; d];
        for (b, row) in qkv.storage_mut::<f32>().chunks_mut(width).enumerate() {
            let table = b * d..(b + 1) * d;
            for head in row[..heads * d].chunks_mut(d) {
                x.copy_from_slice(head);
                rotate_half(&x, &cos[table.clone()], &sin[table.clone()], head);
            }
        }
        qkv
    }
}
