//! The pieces both CPU attentions are made of ([`super::fused_attention`] over whole rows
//! or runs of them, [`super::window_attention`] over a cache's windows): a block of query
//! rows' scores against the keys it sees, its causal softmax (writing or reading each
//! row's log-sum-exp), and the gemm crate's products with the probabilities, on buffers of
//! the caller's.

#![allow(unsafe_code)] // The gemm crate's products take raw pointers.

use super::vector::exp_shifted;
use gemm::Parallelism;

/// Query rows per block: a block's scores, `BLOCK × keys`, stay in the core's cache.
pub(super) const BLOCK: usize = 64;

/// A block's query rows' log-sum-exp: computed by the forward pass, read by the backward.
pub(super) enum Lse<'a> {
    /// Unknown yet: [`Operands::probabilities`] writes it here.
    Into(&'a mut [f32]),
    /// Known: the probabilities are `exp(score − lse)`.
    Known(&'a [f32]),
}

/// A matrix in a flat buffer: its first element and the steps between columns and rows
/// (the gemm crate's order).
#[derive(Clone, Copy)]
pub(super) struct Mat<T> {
    ptr: T,
    cs: isize,
    rs: isize,
}

/// Row-major `[_, cols]` at `ptr`.
pub(super) fn row_major(ptr: *const f32, cols: usize) -> Mat<*const f32> {
    Mat {
        ptr,
        cs: 1,
        rs: cols as isize,
    }
}

/// The transpose of row-major `[_, cols]` at `ptr`.
pub(super) fn transposed(ptr: *const f32, cols: usize) -> Mat<*const f32> {
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
pub(super) unsafe fn product(
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
pub(super) fn softmax_backward(p: &[f32], dp: &mut [f32], dot: f32) {
    dp.iter_mut().zip(p).for_each(|(g, p)| *g = p * (*g - dot));
}
