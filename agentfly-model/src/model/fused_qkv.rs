//! A training or scoring pass's attention straight from the fused query/key/value
//! projection's output: the split into heads, the rotary embedding of queries and keys,
//! the causal attention ([`super::fused_attention`]) and the heads' results laid out again
//! as `[batch, len, heads × d]` for the output projection, as one CPU operation with its
//! own backward pass (a Burn backend extension on flex, plain and under autodiff).
//!
//! Built from Burn's operations, the split and the rotation under autodiff made ~10
//! single-threaded passes over each layer's queries and keys — narrows, a negation, a
//! concatenation, products with the tables and their sums — and their backward passes
//! wrote a zeroed tensor of the whole `qkv` width per narrow, filled in a slice of it and
//! added the three up; the heads' results were transposed once more each way. Here each
//! of those is one parallel pass that reads and writes every value once.
//!
//! The engine's passes with a cache (prefill) attend through the cache instead, so they
//! take the split-and-rotate ([`split_rotated`]) and the heads' layout ([`merge_heads`])
//! as operations of their own.

use super::fused_attention::Operands;
use super::vector::{contiguous, zeros};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

pub use super::fused_attention::serves;

/// Causal self-attention of `qkv` `[batch, len, (heads + 2 kv_heads) × d]` — queries, keys
/// and values side by side, each head's `d` columns together — with queries and keys
/// rotated by `cos` and `sin` `[batch, len, d]` (Hugging Face's `rotate_half` form, as
/// [`super::Rope::apply`]); the heads' results as `[batch, len, heads × d]`. Query head `h`
/// reads key/value head `h / (heads / kv_heads)`. The tables are constants: no gradient
/// flows into them.
///
/// # Panics
/// Unless [`serves`] says yes for the tensors' device, or where the shapes disagree.
pub fn causal(
    qkv: Tensor<3>,
    cos: Tensor<3>,
    sin: Tensor<3>,
    heads: usize,
    kv_heads: usize,
) -> Tensor<3> {
    let len = qkv.dims()[1];
    causal_spans(qkv, cos, sin, heads, kv_heads, &[len])
}

/// [`causal`] over sequences laid end to end in each row: runs of `spans` positions
/// (summing to `len`), each attending to itself alone (the tables give each run's own
/// positions) — [`super::fused_attention::causal_spans`].
///
/// # Panics
/// As [`causal`], and where `spans` do not sum to `len` or one is empty.
pub fn causal_spans(
    qkv: Tensor<3>,
    cos: Tensor<3>,
    sin: Tensor<3>,
    heads: usize,
    kv_heads: usize,
    spans: &[usize],
) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as FusedQkvAttention>::fused_qkv_attention(
        qkv.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        heads,
        kv_heads,
        spans.to_vec(),
    ))
}

/// The extension: see [`causal`].
#[backend_extension(Flex, Autodiff)]
pub trait FusedQkvAttention: Backend {
    /// See [`causal_spans`].
    fn fused_qkv_attention(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        spans: Vec<usize>,
    ) -> FloatTensor<Self>;
}

impl FusedQkvAttention for Flex {
    fn fused_qkv_attention(
        qkv: FlexTensor,
        cos: FlexTensor,
        sin: FlexTensor,
        heads: usize,
        kv_heads: usize,
        spans: Vec<usize>,
    ) -> FlexTensor {
        let dims = Dims::new(&qkv, heads, kv_heads);
        let (cos, sin) = (contiguous(cos), contiguous(sin));
        let operands = dims.split(&contiguous(qkv), &cos, &sin).with_spans(spans);
        dims.merge_heads(&operands.forward().0)
    }
}

impl<C: CheckpointStrategy> FusedQkvAttention for Autodiff<Flex, C> {
    fn fused_qkv_attention(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
        spans: Vec<usize>,
    ) -> FloatTensor<Self> {
        let (cos, sin) = (
            contiguous(cos.into_primitive()),
            contiguous(sin.into_primitive()),
        );
        match FusedQkvBackward
            .prepare::<C>([qkv.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let qkv = contiguous(qkv.primitive().clone());
                let dims = Dims::new(&qkv, heads, kv_heads);
                let operands = dims.split(&qkv, &cos, &sin).with_spans(spans);
                let (out, lse) = operands.forward();
                let merged = dims.merge_heads(&out);
                prep.finish(
                    State {
                        dims,
                        operands,
                        out,
                        lse,
                        cos,
                        sin,
                    },
                    merged,
                )
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fused_qkv_attention(
                qkv.into_primitive(),
                cos,
                sin,
                heads,
                kv_heads,
                spans,
            )),
        }
    }
}

/// A pass with a cache on the CPU (the engine's prefill): the heads of `qkv`
/// `[batch, len, (heads + 2 kv_heads) × d]` as `[batch, heads + 2 kv_heads, len, d]` — the
/// queries', then the keys', then the values' — queries and keys rotated by `cos` and `sin`
/// `[batch, len, d]`, in one parallel pass: the numbers of Burn's narrows and
/// [`super::Rope::apply`] (seven passes a tensor), to the bit. Plain flex only
/// ([`super::decode_attention::serves`]).
pub fn split_rotated(
    qkv: Tensor<3>,
    cos: Tensor<3>,
    sin: Tensor<3>,
    heads: usize,
    kv_heads: usize,
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as HeadsLayout>::split_rotated(
        qkv.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        heads,
        kv_heads,
    ))
}

/// The heads' results `[batch, heads, len, d]` as `[batch, len, heads × d]` for the output
/// projection, in one parallel pass. Plain flex only.
pub fn merge_heads(out: Tensor<4>) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as HeadsLayout>::merge_heads(out.into_dispatch()))
}

/// The extension behind [`split_rotated`] and [`merge_heads`].
#[backend_extension(Flex)]
trait HeadsLayout: Backend {
    /// See [`split_rotated`].
    fn split_rotated(
        qkv: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        heads: usize,
        kv_heads: usize,
    ) -> FloatTensor<Self>;

    /// See [`merge_heads`].
    fn merge_heads(out: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl HeadsLayout for Flex {
    fn split_rotated(
        qkv: FlexTensor,
        cos: FlexTensor,
        sin: FlexTensor,
        heads: usize,
        kv_heads: usize,
    ) -> FlexTensor {
        let qkv = contiguous(qkv);
        let dims = Dims::new(&qkv, heads, kv_heads);
        let (cos, sin) = (contiguous(cos), contiguous(sin));
        let table = [dims.batch, dims.len, dims.d];
        for t in [&cos, &sin] {
            assert_eq!(t.layout().shape().to_vec(), table, "a table row a position");
        }
        dims.heads_of(&qkv, &cos, &sin, 0..heads + 2 * kv_heads)
    }

    fn merge_heads(out: FlexTensor) -> FlexTensor {
        let out = contiguous(out);
        let shape = out.layout().shape().to_vec();
        let [batch, heads, len, d] = shape[..] else {
            panic!("merge heads: [batch, heads, len, d], got {shape:?}")
        };
        swap_axes(&out, [batch, heads, len, d], vec![batch, len, heads * d])
    }
}

/// What the backward pass reads: the rotated operands, the attention's output
/// `[batch, heads, len, d]` and log-sum-exps, and the tables.
#[derive(Debug, Clone)]
struct State {
    dims: Dims,
    operands: Operands,
    out: FlexTensor,
    lse: Vec<f32>,
    cos: FlexTensor,
    sin: FlexTensor,
}

#[derive(Debug)]
struct FusedQkvBackward;

impl Backward<Flex, 1> for FusedQkvBackward {
    type State = State;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = contiguous(grads.consume::<Flex>(&ops.node));
        let Some(node) = node else { return };
        let s = ops.state;
        let (dq, dk, dv) = s
            .operands
            .backward(&s.out, &s.lse, &s.dims.split_heads(&grad));
        grads.register::<Flex>(node.id, s.dims.join(&dq, &dk, &dv, &s.cos, &s.sin));
    }
}

/// The shape of one call.
#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    len: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
}

impl Dims {
    fn new(qkv: &FlexTensor, heads: usize, kv_heads: usize) -> Self {
        let dims = qkv.layout().shape().to_vec();
        let [batch, len, width] = dims[..] else {
            panic!("fused qkv attention: qkv is [batch, len, width], got {dims:?}")
        };
        let columns = heads + 2 * kv_heads;
        assert!(
            kv_heads > 0 && heads.is_multiple_of(kv_heads) && width.is_multiple_of(columns),
            "fused qkv attention: width {width} for {heads} heads and {kv_heads} kv heads"
        );
        Self {
            batch,
            len,
            heads,
            kv_heads,
            d: width / columns,
        }
    }

    fn width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.d
    }

    /// The queries, keys and values of `qkv` as `[batch, heads or kv_heads, len, d]`,
    /// queries and keys rotated.
    fn split(&self, qkv: &FlexTensor, cos: &FlexTensor, sin: &FlexTensor) -> Operands {
        let (heads, kv) = (self.heads, self.kv_heads);
        let q = self.heads_of(qkv, cos, sin, 0..heads);
        let k = self.heads_of(qkv, cos, sin, heads..heads + kv);
        let v = self.heads_of(qkv, cos, sin, heads + kv..heads + 2 * kv);
        Operands::new(q, k, v, heads / kv, 0)
    }

    /// The heads `among` of `qkv` (queries', keys', values' heads counted one after the
    /// other) as `[batch, among.len(), len, d]`, the queries' and keys' rotated.
    fn heads_of(
        &self,
        qkv: &FlexTensor,
        cos: &FlexTensor,
        sin: &FlexTensor,
        among: std::ops::Range<usize>,
    ) -> FlexTensor {
        let count = among.len();
        let mut t = zeros(Shape::from(vec![self.batch, count, self.len, self.d]));
        let (src, cos, sin) = (
            qkv.storage::<f32>(),
            cos.storage::<f32>(),
            sin.storage::<f32>(),
        );
        let d = self.d;
        t.storage_mut::<f32>()
            .par_chunks_mut(self.len * d)
            .enumerate()
            .for_each(|(pair, dst)| {
                let (b, h) = (pair / count, among.start + pair % count);
                let rotate = h < self.heads + self.kv_heads;
                for (t, dst) in dst.chunks_exact_mut(d).enumerate() {
                    let row = b * self.len + t;
                    let x = &src[row * self.width() + h * d..][..d];
                    if rotate {
                        let table = row * d..(row + 1) * d;
                        rotate_half(x, &cos[table.clone()], &sin[table], dst);
                    } else {
                        dst.copy_from_slice(x);
                    }
                }
            });
        t
    }

    /// `[batch, heads, len, d]` as `[batch, len, heads × d]`.
    fn merge_heads(&self, out: &FlexTensor) -> FlexTensor {
        let shape = vec![self.batch, self.len, self.heads * self.d];
        swap_axes(out, [self.batch, self.heads, self.len, self.d], shape)
    }

    /// `[batch, len, heads × d]` as `[batch, heads, len, d]`.
    fn split_heads(&self, merged: &FlexTensor) -> FlexTensor {
        let shape = vec![self.batch, self.heads, self.len, self.d];
        swap_axes(merged, [self.batch, self.len, self.heads, self.d], shape)
    }

    /// The gradient of `qkv` from those of the rotated queries and keys and the values:
    /// the rotations undone, the heads side by side again.
    fn join(
        &self,
        dq: &FlexTensor,
        dk: &FlexTensor,
        dv: &FlexTensor,
        cos: &FlexTensor,
        sin: &FlexTensor,
    ) -> FlexTensor {
        let (len, d) = (self.len, self.d);
        let mut dqkv = zeros(Shape::from(vec![self.batch, len, self.width()]));
        let (cos, sin) = (cos.storage::<f32>(), sin.storage::<f32>());
        let parts = [
            (dq.storage::<f32>(), self.heads, true),
            (dk.storage::<f32>(), self.kv_heads, true),
            (dv.storage::<f32>(), self.kv_heads, false),
        ];
        dqkv.storage_mut::<f32>()
            .par_chunks_mut(self.width())
            .enumerate()
            .for_each(|(row, dst)| {
                let (b, t) = (row / len, row % len);
                let table = row * d..(row + 1) * d;
                let mut heads_done = 0;
                for (src, heads, rotated) in parts {
                    for h in 0..heads {
                        let g = &src[((b * heads + h) * len + t) * d..][..d];
                        let out = &mut dst[(heads_done + h) * d..][..d];
                        if rotated {
                            unrotate_half(g, &cos[table.clone()], &sin[table.clone()], out);
                        } else {
                            out.copy_from_slice(g);
                        }
                    }
                    heads_done += heads;
                }
            });
        dqkv
    }
}

/// `y = x · cos + rotate_half(x) · sin`, `rotate_half(x) = [−x₂, x₁]` for the halves of `x`.
pub(super) fn rotate_half(x: &[f32], cos: &[f32], sin: &[f32], y: &mut [f32]) {
    let half = x.len() / 2;
    for i in 0..half {
        y[i] = x[i] * cos[i] - x[i + half] * sin[i];
        y[i + half] = x[i + half] * cos[i + half] + x[i] * sin[i + half];
    }
}

/// The gradient of [`rotate_half`]'s `x` from `y`'s, `dy`.
fn unrotate_half(dy: &[f32], cos: &[f32], sin: &[f32], dx: &mut [f32]) {
    let half = dy.len() / 2;
    for i in 0..half {
        dx[i] = dy[i] * cos[i] + dy[i + half] * sin[i + half];
        dx[i + half] = dy[i + half] * cos[i + half] - dy[i] * sin[i];
    }
}

/// `src`, laid out as `[batch, a, b, d]`, copied as `[batch, b, a, d]` into a tensor of
/// `shape` (the same values, grouped as the caller wants them).
fn swap_axes(src: &FlexTensor, [batch, a, b, d]: [usize; 4], shape: Vec<usize>) -> FlexTensor {
    let mut out = zeros(Shape::from(shape));
    let src = src.storage::<f32>();
    assert_eq!(
        src.len(),
        batch * a * b * d,
        "swap_axes: {batch}×{a}×{b}×{d} values"
    );
    out.storage_mut::<f32>()
        .par_chunks_mut(a * d)
        .enumerate()
        .for_each(|(row, dst)| {
            let (n, j) = (row / b, row % b);
            for (i, dst) in dst.chunks_exact_mut(d).enumerate() {
                dst.copy_from_slice(&src[((n * a + i) * b + j) * d..][..d]);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Rope;
    use crate::model::attention::blocked;
    use burn::tensor::{Device, Distribution, Int};

    fn max_diff(a: Tensor<3>, b: Tensor<3>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// The output and `qkv`'s gradient against Burn's operations — narrows, the rotation
    /// of [`Rope::apply`], the blocked causal attention and the heads' transpose — over
    /// several blocks, at positions that do not start at 0.
    #[test]
    fn output_and_gradient_equal_burns_split_rotation_and_attention() {
        let device = Device::flex().autodiff();
        let normal = Distribution::Normal(0.0, 1.0);
        let (batch, heads, kv_heads, len, d) = (2, 6, 2, 141, 64);
        let width = (heads + 2 * kv_heads) * d;
        let qkv = Tensor::<3>::random([batch, len, width], normal, &device).require_grad();
        let weights = Tensor::<3>::random([batch, len, heads * d], normal, &device);
        let rope = Rope::new(d, 512, 10_000.0, &device);
        let positions = Tensor::<1, Int>::arange(7..7 + len as i64, &device)
            .reshape([1, len])
            .repeat_dim(0, batch);
        let (cos, sin) = rope.tables(positions);
        let reference = |qkv: Tensor<3>| {
            let split = |start: usize, n: usize| {
                qkv.clone()
                    .narrow(2, start * d, n * d)
                    .reshape([batch, len, n, d])
                    .swap_dims(1, 2)
            };
            let q = rope.apply(split(0, heads), &cos, &sin);
            let k = rope.apply(split(heads, kv_heads), &cos, &sin);
            let v = split(heads + kv_heads, kv_heads);
            blocked(q, k, v, heads / kv_heads, 0)
                .swap_dims(1, 2)
                .reshape([batch, len, heads * d])
        };
        let table = |t: &Tensor<4>| t.clone().reshape([batch, len, d]);
        let fused = |qkv: Tensor<3>| causal(qkv, table(&cos), table(&sin), heads, kv_heads);
        let run = |f: &dyn Fn(Tensor<3>) -> Tensor<3>| {
            let out = f(qkv.clone());
            let grads = (out.clone() * weights.clone()).sum().backward();
            (out.inner(), qkv.grad(&grads).expect("a gradient"))
        };
        let (out, grad) = run(&fused);
        let (want, want_grad) = run(&reference);
        let (out_diff, grad_diff) = (max_diff(out, want), max_diff(grad, want_grad.clone()));
        let scale = want_grad.abs().max().into_scalar::<f32>();
        assert!(out_diff < 1e-4, "output: max |Δ| {out_diff}");
        assert!(
            grad_diff < 1e-4 * scale.max(1.0),
            "dqkv: max |Δ| {grad_diff} (scale {scale})"
        );
    }

    /// The engine's split and merge: the same numbers as Burn's narrows, rotation and
    /// transpose, to the bit.
    #[test]
    fn split_rotated_and_merge_heads_equal_burns_operations() {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let (batch, heads, kv_heads, len, d) = (2, 6, 2, 37, 64);
        let qkv = Tensor::<3>::random([batch, len, (heads + 2 * kv_heads) * d], normal, &device);
        let rope = Rope::new(d, 512, 10_000.0, &device);
        let positions = Tensor::<1, Int>::arange(7..7 + len as i64, &device)
            .reshape([1, len])
            .repeat_dim(0, batch);
        let (cos, sin) = rope.tables(positions);
        let split = |start: usize, n: usize| {
            qkv.clone()
                .narrow(2, start * d, n * d)
                .reshape([batch, len, n, d])
                .swap_dims(1, 2)
        };
        let want = Tensor::cat(
            vec![
                rope.apply(split(0, heads), &cos, &sin),
                rope.apply(split(heads, kv_heads), &cos, &sin),
                split(heads + kv_heads, kv_heads),
            ],
            1,
        );
        let table = |t: &Tensor<4>| t.clone().reshape([batch, len, d]);
        let got = split_rotated(qkv.clone(), table(&cos), table(&sin), heads, kv_heads);
        let diff = (got.clone() - want).abs().max().into_scalar::<f32>();
        assert_eq!(diff, 0.0, "split and rotation: max |Δ| {diff}");
        let merged = merge_heads(got.clone());
        let swapped = got
            .swap_dims(1, 2)
            .reshape([batch, len, (heads + 2 * kv_heads) * d]);
        assert_eq!(max_diff(merged, swapped), 0.0, "merged heads");
    }
}
