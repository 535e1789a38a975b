//! Causal self-attention of the training and scoring passes as one CPU operation with its
//! own backward pass, a Burn backend extension on flex (plain and under autodiff).
//!
//! Built from Burn's operations ([`super::attention`]), attention under autodiff writes the
//! scores and the probabilities of every block as tensors, keeps them for the backward
//! pass and runs ~7 single-threaded elementwise passes over them with a scalar `expf`: on
//! the text-world job's rows of ~1 150 tokens, `expf` alone was a tenth of an RL update
//! and the page faults, copies and fills of those tensors another sixth. Here one task per
//! (row, query head) works through blocks of query rows with the gemm crate's products on
//! buffers of its own: scores, a softmax with a vectorised `exp`, the weighted values. It
//! keeps only the output and each query row's log-sum-exp; the backward pass recomputes
//! the probabilities from them, block by block, as FlashAttention does.

#![allow(unsafe_code)] // The gemm crate's products take raw pointers.

use super::vector::{attention_operands, contiguous, exp_shifted, zeros};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{Device, Shape, Tensor};
use gemm::Parallelism;
use rayon::prelude::*;

/// Query rows per block: a block's scores, `BLOCK × keys`, stay in the core's cache.
pub(super) const BLOCK: usize = 64;

/// Whether the CPU operations run on `device` (this module's causal attention, and the
/// projections' products, SwiGLU and the fused qkv attention, which share the test): a
/// flex (CPU) device, with or without autodiff.
pub fn serves(device: &Device) -> bool {
    matches!(
        device.as_dispatch().clone().inner(),
        DispatchDevice::Flex(_)
    )
}

/// Causal self-attention, `softmax(q · kᵀ / √d) · v`: `q` `[batch, heads, len, d]`, `k`
/// and `v` `[batch, kv_heads, prefix + len, d]` with `heads = group × kv_heads` (query head
/// `h` reads key/value head `h / group`); query row `i` sees keys `0..=prefix + i`.
///
/// # Panics
/// Unless [`serves`] says yes for the tensors' device, or where the shapes disagree.
pub fn causal(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, group: usize, prefix: usize) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as FusedAttention>::fused_causal_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        group,
        prefix,
    ))
}

/// The extension: causal attention, differentiable.
#[backend_extension(Flex, Autodiff)]
pub trait FusedAttention: Backend {
    /// See [`causal`].
    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        group: usize,
        prefix: usize,
    ) -> FloatTensor<Self>;
}

impl FusedAttention for Flex {
    fn fused_causal_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        group: usize,
        prefix: usize,
    ) -> FlexTensor {
        Operands::new(q, k, v, group, prefix).forward().0
    }
}

impl<C: CheckpointStrategy> FusedAttention for Autodiff<Flex, C> {
    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        group: usize,
        prefix: usize,
    ) -> FloatTensor<Self> {
        match FusedAttentionBackward
            .prepare::<C>([q.node(), k.node(), v.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let operands = Operands::new(
                    q.primitive().clone(),
                    k.primitive().clone(),
                    v.primitive().clone(),
                    group,
                    prefix,
                );
                let (out, lse) = operands.forward();
                prep.finish((operands, out.clone(), lse), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fused_causal_attention(
                q.into_primitive(),
                k.into_primitive(),
                v.into_primitive(),
                group,
                prefix,
            )),
        }
    }
}

#[derive(Debug)]
struct FusedAttentionBackward;

impl Backward<Flex, 3> for FusedAttentionBackward {
    /// The operands, the output and each query row's log-sum-exp.
    type State = (Operands, FlexTensor, Vec<f32>);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents;
        let grad = contiguous(grads.consume::<Flex>(&ops.node));
        let (operands, out, lse) = ops.state;
        let (dq, dk, dv) = operands.backward(&out, &lse, &grad);
        for (node, g) in [(node_q, dq), (node_k, dk), (node_v, dv)] {
            if let Some(node) = node {
                grads.register::<Flex>(node.id, g);
            }
        }
    }
}

/// A block's query rows' log-sum-exp: computed by the forward pass, read by the backward.
pub(super) enum Lse<'a> {
    /// Unknown yet: [`Operands::probabilities`] writes it here.
    Into(&'a mut [f32]),
    /// Known: the probabilities are `exp(score − lse)`.
    Known(&'a [f32]),
}

/// The three operands, contiguous, and their shape.
#[derive(Debug, Clone)]
pub(super) struct Operands {
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    batch: usize,
    heads: usize,
    group: usize,
    len: usize,
    prefix: usize,
    d: usize,
}

/// A matrix in a flat buffer: its first element and the steps between columns and rows
/// (the gemm crate's order).
#[derive(Clone, Copy)]
struct Mat<T> {
    ptr: T,
    cs: isize,
    rs: isize,
}

/// Row-major `[_, cols]` at `ptr`.
fn row_major(ptr: *const f32, cols: usize) -> Mat<*const f32> {
    Mat {
        ptr,
        cs: 1,
        rs: cols as isize,
    }
}

/// The transpose of row-major `[_, cols]` at `ptr`.
fn transposed(ptr: *const f32, cols: usize) -> Mat<*const f32> {
    Mat {
        ptr,
        cs: cols as isize,
        rs: 1,
    }
}

/// `dst (m × n, row-major) = [dst +] scale · a (m × k) · b (k × n)`, on this thread.
///
/// # Safety
/// Every matrix lies within its buffer, and `dst` overlaps neither operand.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    accumulate: bool,
    a: Mat<*const f32>,
    b: Mat<*const f32>,
    scale: f32,
) {
    // SAFETY: the caller's.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            1.0,
            scale,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// `dst = scale · p · m`, or `dst += scale · pᵀ · m` when `transpose`: `p` is a block's
/// `rows × seen` probabilities (or their gradient), `m` values, keys, queries or output
/// gradients (`seen × d`, or `rows × d` when transposed), every matrix row-major.
///
/// # Safety
/// As [`product`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weigh(
    rows: usize,
    seen: usize,
    d: usize,
    transpose: bool,
    dst: &mut [f32],
    p: &[f32],
    m: &[f32],
    scale: f32,
) {
    let (n, inner) = if transpose {
        (seen, rows)
    } else {
        (rows, seen)
    };
    // Checked always: the product below reads and writes through raw pointers, and the
    // check costs nothing next to it.
    assert!(
        dst.len() >= n * d && p.len() >= rows * seen && m.len() >= inner * d,
        "weigh: slices shorter than the product's {rows}×{seen}, {inner}×{d} operands"
    );
    let p = if transpose {
        transposed(p.as_ptr(), seen)
    } else {
        row_major(p.as_ptr(), seen)
    };
    // SAFETY: the caller's.
    unsafe {
        product(
            n,
            d,
            inner,
            dst.as_mut_ptr(),
            transpose,
            p,
            row_major(m.as_ptr(), d),
            scale,
        );
    }
}

impl Operands {
    pub(super) fn new(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        group: usize,
        prefix: usize,
    ) -> Self {
        let what = "causal attention: q is [batch, heads, len, d]";
        let ([q, k, v], dims, kv) = attention_operands(q, k, v, what);
        let [batch, heads, len, d] = dims;
        assert!(
            group > 0 && heads % group == 0 && kv == [batch, heads / group, prefix + len, d],
            "causal attention: k is [batch, heads / group, prefix + len, d], got {kv:?} for \
             q {dims:?}, group {group}, prefix {prefix}"
        );
        Self {
            q,
            k,
            v,
            batch,
            heads,
            group,
            len,
            prefix,
            d,
        }
    }

    fn keys(&self) -> usize {
        self.prefix + self.len
    }

    /// Query head `pair` (of all rows' heads)'s key/value head's first element.
    fn kv_offset(&self, pair: usize) -> usize {
        (pair / self.group) * self.keys() * self.d
    }

    /// Block `start..start + rows` of `pair`'s query rows: its scores against the keys they
    /// see (`scores`, `rows × seen`, row-major), then the probabilities. Returns `seen`.
    fn probabilities(
        &self,
        pair: usize,
        start: usize,
        rows: usize,
        scores: &mut [f32],
        lse: Lse<'_>,
    ) -> usize {
        let (d, prefix) = (self.d, self.prefix);
        let seen = prefix + start + rows;
        let q = &self.q.storage::<f32>()[(pair * self.len + start) * d..][..rows * d];
        let k = &self.k.storage::<f32>()[self.kv_offset(pair)..][..seen * d];
        causal_probabilities(q, k, d, prefix + start + 1, scores, lse);
        seen
    }

    /// The output `[batch, heads, len, d]` and each query row's log-sum-exp.
    pub(super) fn forward(&self) -> (FlexTensor, Vec<f32>) {
        let (len, d) = (self.len, self.d);
        let pairs = self.batch * self.heads;
        let mut out = zeros(Shape::from(vec![self.batch, self.heads, len, d]));
        let mut lse = vec![0f32; pairs * len];
        let v = self.v.storage::<f32>();
        out.storage_mut::<f32>()
            .par_chunks_mut(len * d)
            .zip(lse.par_chunks_mut(len))
            .enumerate()
            .for_each(|(pair, (out, lse))| {
                let mut scores = vec![0f32; BLOCK.min(len) * self.keys()];
                let v = &v[self.kv_offset(pair)..];
                for start in (0..len).step_by(BLOCK) {
                    let rows = BLOCK.min(len - start);
                    let lse = Lse::Into(&mut lse[start..start + rows]);
                    let seen = self.probabilities(pair, start, rows, &mut scores, lse);
                    // SAFETY: `rows × seen` probabilities, `seen` values and `rows` output
                    // rows of `d` lie in their buffers.
                    unsafe { weigh(rows, seen, d, false, &mut out[start * d..], &scores, v, 1.0) };
                }
            });
        (out, lse)
    }

    /// The gradients of `q`, `k` and `v` given the output's, `grad` (contiguous).
    pub(super) fn backward(
        &self,
        out: &FlexTensor,
        lse: &[f32],
        grad: &FlexTensor,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        let (len, d, keys) = (self.len, self.d, self.keys());
        let pairs = self.batch * self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        let mut dq = zeros(self.q.layout().shape().clone());
        // Each query head's share of its key/value head's gradients, summed below.
        let mut dk_parts = vec![0f32; pairs * keys * d];
        let mut dv_parts = vec![0f32; pairs * keys * d];
        let (q, k, v) = (
            self.q.storage::<f32>(),
            self.k.storage::<f32>(),
            self.v.storage::<f32>(),
        );
        let (o, g) = (out.storage::<f32>(), grad.storage::<f32>());
        dq.storage_mut::<f32>()
            .par_chunks_mut(len * d)
            .zip(dk_parts.par_chunks_mut(keys * d))
            .zip(dv_parts.par_chunks_mut(keys * d))
            .enumerate()
            .for_each(|(pair, ((dq, dk), dv))| {
                let at = pair * len * d;
                let (q, o, g) = (
                    &q[at..at + len * d],
                    &o[at..at + len * d],
                    &g[at..at + len * d],
                );
                let (k, v) = (&k[self.kv_offset(pair)..], &v[self.kv_offset(pair)..]);
                // Each row's Σ dO·O, the softmax's backward term.
                let dot: Vec<f32> = o
                    .chunks_exact(d)
                    .zip(g.chunks_exact(d))
                    .map(|(o, g)| o.iter().zip(g).map(|(a, b)| a * b).sum())
                    .collect();
                let mut probs = vec![0f32; BLOCK.min(len) * keys];
                let mut dprobs = vec![0f32; BLOCK.min(len) * keys];
                for start in (0..len).step_by(BLOCK) {
                    let rows = BLOCK.min(len - start);
                    let block_lse = Lse::Known(&lse[pair * len + start..pair * len + start + rows]);
                    let seen = self.probabilities(pair, start, rows, &mut probs, block_lse);
                    let (gb, qb) = (&g[start * d..], &q[start * d..]);
                    // The one product called on raw pointers directly: its operands checked.
                    assert!(
                        dprobs.len() >= rows * seen && gb.len() >= rows * d && v.len() >= seen * d,
                        "dP = dO · Vᵀ: slices shorter than {rows}×{seen}×{d}"
                    );
                    // SAFETY (every product): the blocks' `rows` rows, the `seen` keys and
                    // values and the `rows × seen` buffers lie in their buffers; the
                    // destinations are this task's own.
                    unsafe {
                        // dV += Pᵀ · dO
                        weigh(rows, seen, d, true, dv, &probs, gb, 1.0);
                        // dP = dO · Vᵀ
                        product(
                            rows,
                            seen,
                            d,
                            dprobs.as_mut_ptr(),
                            false,
                            row_major(gb.as_ptr(), d),
                            transposed(v.as_ptr(), d),
                            1.0,
                        );
                    }
                    // dS = P ∘ (dP − Σ dO·O), in place of dP.
                    for r in 0..rows {
                        let row = r * seen..(r + 1) * seen;
                        softmax_backward(&probs[row.clone()], &mut dprobs[row], dot[start + r]);
                    }
                    unsafe {
                        // dQ = dS · K / √d
                        weigh(
                            rows,
                            seen,
                            d,
                            false,
                            &mut dq[start * d..],
                            &dprobs,
                            k,
                            scale,
                        );
                        // dK += dSᵀ · Q / √d
                        weigh(rows, seen, d, true, dk, &dprobs, qb, scale);
                    }
                }
            });
        let kv_shape = self.k.layout().shape().clone();
        (
            dq,
            self.sum_groups(&dk_parts, kv_shape.clone()),
            self.sum_groups(&dv_parts, kv_shape),
        )
    }

    /// Sums each key/value head's query heads' parts (`[pairs, keys, d]`) into a tensor of
    /// `shape` (`[batch, kv_heads, keys, d]`).
    fn sum_groups(&self, parts: &[f32], shape: Shape) -> FlexTensor {
        let size = self.keys() * self.d;
        let mut sum = zeros(shape);
        sum.storage_mut::<f32>()
            .par_chunks_mut(size)
            .enumerate()
            .for_each(|(kv, sum)| {
                let first = kv * self.group;
                sum.copy_from_slice(&parts[first * size..(first + 1) * size]);
                for part in
                    parts[(first + 1) * size..(first + self.group) * size].chunks_exact(size)
                {
                    sum.iter_mut().zip(part).for_each(|(s, p)| *s += p);
                }
            });
        sum
    }
}

/// A block's probabilities: the scores of its query rows `q` (rows of `d`) against the keys
/// `k` (`seen` rows of `d`), `q · kᵀ / √d`, into `scores` (`rows × seen`, row-major), made
/// the causal softmax of row `r` over its first `visible + r` keys ([`causal_softmax`]).
pub(super) fn causal_probabilities(
    q: &[f32],
    k: &[f32],
    d: usize,
    visible: usize,
    scores: &mut [f32],
    lse: Lse<'_>,
) {
    let (rows, seen) = (q.len() / d, k.len() / d);
    assert!(scores.len() >= rows * seen, "room for the block's scores");
    // SAFETY: `q` holds `rows` rows and `k` `seen` rows of `d`, `scores` `rows × seen`.
    unsafe {
        product(
            rows,
            seen,
            d,
            scores.as_mut_ptr(),
            false,
            row_major(q.as_ptr(), d),
            transposed(k.as_ptr(), d),
            1.0 / (d as f32).sqrt(),
        );
    }
    causal_softmax(&mut scores[..rows * seen], seen, visible, lse);
}

/// Each row `r` of a block's scores (rows of `seen`) made the probabilities of its first
/// `visible + r` keys (the keys past them 0): the softmax, its log-sum-exp written into
/// `lse`, or with the log-sum-exp `lse` already knows.
fn causal_softmax(scores: &mut [f32], seen: usize, visible: usize, mut lse: Lse<'_>) {
    for (r, row) in scores.chunks_exact_mut(seen).enumerate() {
        let (row, hidden) = row.split_at_mut(visible + r);
        hidden.fill(0.0);
        match &mut lse {
            Lse::Known(lse) => {
                exp_shifted(row, lse[r]);
            }
            Lse::Into(lse) => {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum = exp_shifted(row, max);
                let inv = 1.0 / sum;
                row.iter_mut().for_each(|p| *p *= inv);
                lse[r] = max + sum.ln();
            }
        }
    }
}

/// `dp ← p ∘ (dp − dot)`.
fn softmax_backward(p: &[f32], dp: &mut [f32], dot: f32) {
    dp.iter_mut().zip(p).for_each(|(g, p)| *g = p * (*g - dot));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::attention::blocked;
    use burn::tensor::Distribution;

    fn max_diff(a: Tensor<4>, b: Tensor<4>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// Outputs and the three gradients of the fused operation against Burn's operations
    /// (under autodiff), with and without a prefix, over several blocks (the last partial).
    #[test]
    fn outputs_and_gradients_equal_the_blocked_burn_operations() {
        let device = Device::flex().autodiff();
        let normal = Distribution::Normal(0.0, 1.0);
        let (batch, kv, group, len, d) = (2, 2, 3, 2 * BLOCK + 13, 64);
        for prefix in [0, 37] {
            let keys = prefix + len;
            let leaf = |dims: [usize; 4]| Tensor::<4>::random(dims, normal, &device).require_grad();
            let q = leaf([batch, kv * group, len, d]);
            let k = leaf([batch, kv, keys, d]);
            let v = leaf([batch, kv, keys, d]);
            let weights = Tensor::<4>::random([batch, kv * group, len, d], normal, &device);
            let run = |f: fn(Tensor<4>, Tensor<4>, Tensor<4>, usize, usize) -> Tensor<4>| {
                let out = f(q.clone(), k.clone(), v.clone(), group, prefix);
                let grads = (out.clone() * weights.clone()).sum().backward();
                let grad = |t: &Tensor<4>| t.grad(&grads).expect("a gradient");
                (out.inner(), grad(&q), grad(&k), grad(&v))
            };
            let (out, dq, dk, dv) = run(causal);
            let (want, want_dq, want_dk, want_dv) = run(blocked);
            for (name, got, want, bound) in [
                ("output", out, want, 1e-5),
                ("dq", dq, want_dq, 1e-4),
                ("dk", dk, want_dk, 1e-4),
                ("dv", dv, want_dv, 1e-4),
            ] {
                let scale = want.clone().abs().max().into_scalar::<f32>();
                let diff = max_diff(got, want);
                assert!(
                    diff < bound * scale.max(1.0),
                    "prefix {prefix}, {name}: max |Δ| {diff} (scale {scale})"
                );
            }
        }
    }

    #[test]
    fn without_autodiff_it_is_the_same_attention() {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let (batch, kv, group, prefix, len, d) = (1, 3, 3, 5, BLOCK + 1, 64);
        let q = Tensor::<4>::random([batch, kv * group, len, d], normal, &device);
        let k = Tensor::<4>::random([batch, kv, prefix + len, d], normal, &device);
        let v = Tensor::<4>::random([batch, kv, prefix + len, d], normal, &device);
        // A strided query (heads and positions swapped back) is read as well.
        let strided = q.clone().swap_dims(1, 2).into_data();
        let strided = Tensor::<4>::from_data(strided, &device).swap_dims(1, 2);
        let want = blocked(q, k.clone(), v.clone(), group, prefix);
        let got = causal(strided, k, v, group, prefix);
        assert!(max_diff(got, want) < 1e-5);
    }
}
