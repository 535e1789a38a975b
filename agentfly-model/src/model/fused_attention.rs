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

use super::attention_blocks::{
    BLOCK, Lse, causal_probabilities, product, row_major, softmax_backward, transposed, weigh,
};
use super::vector::{attention_operands, contiguous, zeros};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{Device, Shape, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

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
    let len = q.dims()[2];
    causal_spans(q, k, v, group, prefix, &[len])
}

/// [`causal`] over sequences laid end to end: each row's `len` query rows (and the keys
/// and values past the `prefix`) are runs of `spans` positions, and a query row sees the
/// prefix and its own run up to itself, never another run — a packed pass over sequences
/// of different lengths without padding.
///
/// # Panics
/// As [`causal`], and where `spans` do not sum to `len` or one is empty.
pub fn causal_spans(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    prefix: usize,
    spans: &[usize],
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as FusedAttention>::fused_causal_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        group,
        prefix,
        spans.to_vec(),
    ))
}

/// The extension: causal attention, differentiable.
#[backend_extension(Flex, Autodiff)]
pub trait FusedAttention: Backend {
    /// See [`causal_spans`].
    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        group: usize,
        prefix: usize,
        spans: Vec<usize>,
    ) -> FloatTensor<Self>;
}

impl FusedAttention for Flex {
    fn fused_causal_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        group: usize,
        prefix: usize,
        spans: Vec<usize>,
    ) -> FlexTensor {
        Operands::new(q, k, v, group, prefix)
            .with_spans(spans)
            .forward()
            .0
    }
}

impl<C: CheckpointStrategy> FusedAttention for Autodiff<Flex, C> {
    fn fused_causal_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        group: usize,
        prefix: usize,
        spans: Vec<usize>,
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
                )
                .with_spans(spans);
                let (out, lse) = operands.forward();
                prep.finish((operands, out.clone(), lse), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fused_causal_attention(
                q.into_primitive(),
                k.into_primitive(),
                v.into_primitive(),
                group,
                prefix,
                spans,
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
    /// Runs of query rows that attend to the prefix and to themselves alone ([`Operands::with_spans`]);
    /// `[len]` for one causal run per row.
    spans: Vec<usize>,
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
            spans: vec![len],
        }
    }

    /// The same operands with each row's queries and keys past the prefix cut into runs of
    /// `spans` positions (summing to the rows' length), each attending to the prefix and to
    /// itself alone: sequences laid end to end in one row, none seeing another.
    ///
    /// # Panics
    /// Where the spans do not cover the rows' length, or one is empty.
    pub(super) fn with_spans(mut self, spans: Vec<usize>) -> Self {
        assert!(
            spans.iter().sum::<usize>() == self.len
                && (spans.len() == 1 || spans.iter().all(|&s| s > 0)),
            "causal attention: spans {spans:?} do not cover {} positions",
            self.len
        );
        self.spans = spans;
        self
    }

    fn keys(&self) -> usize {
        self.prefix + self.len
    }

    /// Query head `pair` (of all rows' heads)'s key/value head's first element.
    fn kv_offset(&self, pair: usize) -> usize {
        (pair / self.group) * self.keys() * self.d
    }

    /// The tasks of both passes, query head by query head, span by span: the order of the
    /// output's rows.
    fn units(&self) -> Vec<Unit> {
        let pairs = self.batch * self.heads;
        let mut units = Vec::with_capacity(pairs * self.spans.len());
        for pair in 0..pairs {
            let mut at = 0;
            for &len in &self.spans {
                units.push(Unit { pair, at, len });
                at += len;
            }
        }
        units
    }

    /// `unit`'s query rows, `[len, d]`.
    fn queries<'a>(&self, all: &'a [f32], unit: Unit) -> &'a [f32] {
        &all[(unit.pair * self.len + unit.at) * self.d..][..unit.len * self.d]
    }

    /// The keys (or values, in `all`) that `unit` sees, `[prefix + len, d]`: the prefix's,
    /// then its own span's; borrowed where they lie together.
    fn seen<'a>(&self, all: &'a [f32], unit: Unit) -> Cow<'a, [f32]> {
        let (d, prefix) = (self.d, self.prefix);
        let head = &all[self.kv_offset(unit.pair)..][..self.keys() * d];
        if unit.at == 0 {
            return Cow::Borrowed(&head[..(prefix + unit.len) * d]);
        }
        let own = &head[(prefix + unit.at) * d..][..unit.len * d];
        if prefix == 0 {
            return Cow::Borrowed(own);
        }
        let mut both = Vec::with_capacity((prefix + unit.len) * d);
        both.extend_from_slice(&head[..prefix * d]);
        both.extend_from_slice(own);
        Cow::Owned(both)
    }

    /// Block `start..start + rows` of `unit`'s query rows `q`: its scores against the keys
    /// `k` they see (`scores`, `rows × seen`, row-major), then the probabilities. Returns
    /// `seen`.
    fn probabilities(
        &self,
        q: &[f32],
        k: &[f32],
        start: usize,
        rows: usize,
        scores: &mut [f32],
        lse: Lse<'_>,
    ) -> usize {
        let (d, prefix) = (self.d, self.prefix);
        let seen = prefix + start + rows;
        let q = &q[start * d..][..rows * d];
        causal_probabilities(q, &k[..seen * d], d, prefix + start + 1, scores, lse);
        seen
    }

    /// The output `[batch, heads, len, d]` and each query row's log-sum-exp.
    pub(super) fn forward(&self) -> (FlexTensor, Vec<f32>) {
        let (len, d) = (self.len, self.d);
        let pairs = self.batch * self.heads;
        let units = self.units();
        let mut out = zeros(Shape::from(vec![self.batch, self.heads, len, d]));
        let mut lse = vec![0f32; pairs * len];
        let (q, k, v) = (
            self.q.storage::<f32>(),
            self.k.storage::<f32>(),
            self.v.storage::<f32>(),
        );
        let outs = pieces(out.storage_mut::<f32>(), units.iter().map(|u| u.len * d));
        let lses = pieces(&mut lse, units.iter().map(|u| u.len));
        units
            .par_iter()
            .zip(outs)
            .zip(lses)
            .for_each(|((&unit, out), lse)| {
                let (q, k, v) = (
                    self.queries(q, unit),
                    self.seen(k, unit),
                    self.seen(v, unit),
                );
                let mut scores = vec![0f32; BLOCK.min(unit.len) * (self.prefix + unit.len)];
                for start in (0..unit.len).step_by(BLOCK) {
                    let rows = BLOCK.min(unit.len - start);
                    let lse = Lse::Into(&mut lse[start..start + rows]);
                    let seen = self.probabilities(q, &k, start, rows, &mut scores, lse);
                    // SAFETY: `rows × seen` probabilities, `seen` values and `rows` output
                    // rows of `d` lie in their buffers.
                    unsafe {
                        weigh(
                            rows,
                            seen,
                            d,
                            false,
                            &mut out[start * d..],
                            &scores,
                            &v,
                            1.0,
                        )
                    };
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
        let (len, d, prefix) = (self.len, self.d, self.prefix);
        let scale = 1.0 / (d as f32).sqrt();
        let units = self.units();
        let mut dq = zeros(self.q.layout().shape().clone());
        // Each unit's gradients of the keys and values it sees, `[prefix + len, d]`, summed
        // into their key/value heads below.
        let seen_size = |u: &Unit| (prefix + u.len) * d;
        let total: usize = units.iter().map(seen_size).sum();
        let (mut dk_parts, mut dv_parts) = (vec![0f32; total], vec![0f32; total]);
        let (q, k, v) = (
            self.q.storage::<f32>(),
            self.k.storage::<f32>(),
            self.v.storage::<f32>(),
        );
        let (o, g) = (out.storage::<f32>(), grad.storage::<f32>());
        let dqs = pieces(dq.storage_mut::<f32>(), units.iter().map(|u| u.len * d));
        let dks = pieces(&mut dk_parts, units.iter().map(seen_size));
        let dvs = pieces(&mut dv_parts, units.iter().map(seen_size));
        units
            .par_iter()
            .zip(dqs)
            .zip(dks)
            .zip(dvs)
            .for_each(|(((&unit, dq), dk), dv)| {
                let (q, o, g) = (
                    self.queries(q, unit),
                    self.queries(o, unit),
                    self.queries(g, unit),
                );
                let (k, v) = (self.seen(k, unit), self.seen(v, unit));
                // Each row's Σ dO·O, the softmax's backward term.
                let dot: Vec<f32> = o
                    .chunks_exact(d)
                    .zip(g.chunks_exact(d))
                    .map(|(o, g)| o.iter().zip(g).map(|(a, b)| a * b).sum())
                    .collect();
                let lse = &lse[unit.pair * len + unit.at..][..unit.len];
                let mut probs = vec![0f32; BLOCK.min(unit.len) * (prefix + unit.len)];
                let mut dprobs = probs.clone();
                for start in (0..unit.len).step_by(BLOCK) {
                    let rows = BLOCK.min(unit.len - start);
                    let block_lse = Lse::Known(&lse[start..start + rows]);
                    let seen = self.probabilities(q, &k, start, rows, &mut probs, block_lse);
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
                            &k,
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
            self.sum_groups(&dk_parts, &units, kv_shape.clone()),
            self.sum_groups(&dv_parts, &units, kv_shape),
        )
    }

    /// Sums the units' parts (each `[prefix + len, d]`, in `units`' order) into the
    /// key/value heads they read, a tensor of `shape` (`[batch, kv_heads, keys, d]`): the
    /// prefix's rows from every unit of the head's query heads, a span's from its own.
    fn sum_groups(&self, parts: &[f32], units: &[Unit], shape: Shape) -> FlexTensor {
        let (d, prefix) = (self.d, self.prefix);
        let mut starts = Vec::with_capacity(units.len());
        let mut at = 0;
        for u in units {
            starts.push(at);
            at += (prefix + u.len) * d;
        }
        // Units run query head by query head: a key/value head's are one run of them.
        let per_kv_head = self.group * self.spans.len();
        let mut sum = zeros(shape);
        sum.storage_mut::<f32>()
            .par_chunks_mut(self.keys() * d)
            .enumerate()
            .for_each(|(kv, sum)| {
                for i in kv * per_kv_head..(kv + 1) * per_kv_head {
                    let u = units[i];
                    let part = &parts[starts[i]..][..(prefix + u.len) * d];
                    let (of_prefix, own) = part.split_at(prefix * d);
                    let add = |dst: &mut [f32], src: &[f32]| {
                        dst.iter_mut().zip(src).for_each(|(s, p)| *s += p);
                    };
                    add(&mut sum[..prefix * d], of_prefix);
                    add(&mut sum[(prefix + u.at) * d..][..u.len * d], own);
                }
            });
        sum
    }
}

/// One task of the passes: query head `pair`'s span of query rows `at..at + len`.
#[derive(Debug, Clone, Copy)]
struct Unit {
    pair: usize,
    at: usize,
    len: usize,
}

/// `buf` cut into consecutive pieces of `sizes` (what they do not cover left out).
fn pieces(mut buf: &mut [f32], sizes: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut out = Vec::new();
    for size in sizes {
        let (piece, rest) = std::mem::take(&mut buf).split_at_mut(size);
        out.push(piece);
        buf = rest;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::attention::{blocked, span_by_span};
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

    /// Sequences laid end to end (`spans`) after a shared prefix: the output and the three
    /// gradients equal each sequence's own pass after the prefix, the prefix's gradients
    /// summed over the sequences that read it.
    #[test]
    fn spans_attend_to_the_prefix_and_themselves_alone() {
        let device = Device::flex().autodiff();
        let normal = Distribution::Normal(0.0, 1.0);
        let (kv, group, d) = (2, 3, 32);
        let spans = [BLOCK + 5, 1, 17, 2 * BLOCK + 1];
        let len: usize = spans.iter().sum();
        for prefix in [0, 23] {
            let leaf = |dims: [usize; 4]| Tensor::<4>::random(dims, normal, &device).require_grad();
            let q = leaf([1, kv * group, len, d]);
            let k = leaf([1, kv, prefix + len, d]);
            let v = leaf([1, kv, prefix + len, d]);
            let weights = Tensor::<4>::random([1, kv * group, len, d], normal, &device);
            let packed = causal_spans(q.clone(), k.clone(), v.clone(), group, prefix, &spans);
            let alone = span_by_span(
                q.clone(),
                k.clone(),
                v.clone(),
                group,
                prefix,
                &spans,
                causal,
            );
            let grads_of = |out: Tensor<4>| {
                let grads = (out * weights.clone()).sum().backward();
                let grad = |t: &Tensor<4>| t.grad(&grads).expect("a gradient");
                (grad(&q), grad(&k), grad(&v))
            };
            let diff = max_diff(packed.clone().inner(), alone.clone().inner());
            assert!(diff < 1e-5, "prefix {prefix}: outputs differ by {diff}");
            let (got, want) = (grads_of(packed), grads_of(alone));
            for (name, got, want) in [
                ("dq", got.0, want.0),
                ("dk", got.1, want.1),
                ("dv", got.2, want.2),
            ] {
                let scale = want.clone().abs().max().into_scalar::<f32>();
                let diff = max_diff(got, want);
                assert!(
                    diff < 1e-5 * scale.max(1.0),
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
