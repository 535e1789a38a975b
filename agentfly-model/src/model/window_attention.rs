//! Attention of the engine's passes with a cache over several query rows a sequence —
//! left-padded prompts, turns after cached prefixes — on the CPU, each row in its
//! [`Window`] of the cache's buffers.
//!
//! Through the training pass's fused operation a pass took one operation per row: each
//! copied its row's keys and values out of the cache's buffers (those buffers hold every
//! row's room to grow, so a row's keys are not contiguous), spread that row's few heads over
//! the threads, and the rows' outputs were joined by another copy. Here one task per (row,
//! query head) reads its keys and values where the cache keeps them and writes its output
//! in place, in blocks of query rows as the fused operation does (the gemm crate's products
//! for the scores and the weighted values, a vectorised softmax between them), and all the
//! rows' heads share the threads at once. A Burn backend extension on plain flex (the
//! serving copy never differentiates); [`super::decode_attention::all_served`] says when
//! to call it.

#![allow(unsafe_code)] // The gemm crate's products take raw pointers.

use super::attention_blocks::{BLOCK, Lse, causal_probabilities, weigh};
use super::vector::{Shared, attention_operands, zeros};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

/// Which keys one row of a pass with a cache sees: its query rows from `queries_from` on
/// (those before are padding, their output unread) see the keys from `keys_from` on, of
/// which the first `prefix` come before the queries' own. Query row `queries_from + i`
/// sees keys `keys_from..=keys_from + prefix + i`. A decode step's row is the window
/// `{0, 0, p}` of its one query at position `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The row's first real query.
    pub queries_from: usize,
    /// The key of the row's first visible position.
    pub keys_from: usize,
    /// The visible keys before the first real query's own.
    pub prefix: usize,
}

impl Window {
    /// The window of a row whose queries follow `prefix` keys at the start of its buffer,
    /// with no padding: a turn after its cached prefix, or a decode step at position
    /// `prefix`.
    pub fn after(prefix: usize) -> Self {
        Self {
            queries_from: 0,
            keys_from: 0,
            prefix,
        }
    }

    /// Whether query row `q` sees key `key`. A padding query row sees only the key at its
    /// own position, so that no row of a softmax is empty.
    pub fn sees(&self, q: usize, key: usize) -> bool {
        let own = (self.keys_from + self.prefix + q).saturating_sub(self.queries_from);
        if q < self.queries_from {
            key == own
        } else {
            (self.keys_from..=own).contains(&key)
        }
    }
}

/// The query rows of a pass that one cache row's window applies to: `count` rows of `q`'s
/// batch row `row` from `first` on (a window's `queries_from` already counted in `first`),
/// seeing cache row `cache_row`'s keys from `keys_from` on, `prefix` of them before the
/// first query's own.
#[derive(Debug, Clone, Copy)]
struct Span {
    row: usize,
    first: usize,
    count: usize,
    cache_row: usize,
    keys_from: usize,
    prefix: usize,
}

/// `softmax(q · kᵀ / √d) · v` of each row of `q` `[batch, heads, len, d]` over the keys its
/// window shows of `k` and `v` `[batch, kv_heads, capacity, d]` (query head `h` reads
/// key/value head `h / group`). A padding query row (before the window's `queries_from`)
/// gets zeros: its output is never read.
///
/// # Panics
/// Unless every operand is on the plain flex device, or where the shapes disagree or a
/// window reaches past the capacity.
pub fn attend(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    windows: &[Window],
) -> Tensor<4> {
    let len = q.dims()[2];
    let spans = windows
        .iter()
        .enumerate()
        .map(|(i, w)| Span {
            row: i,
            first: w.queries_from,
            count: len.saturating_sub(w.queries_from),
            cache_row: i,
            keys_from: w.keys_from,
            prefix: w.prefix,
        })
        .collect();
    run(q, k, v, group, spans)
}

/// [`attend`] for a packed pass: `q` `[1, heads, Σ lens, d]` holds the rows' query rows one
/// after the other, row `i`'s `lens[i]` of them following its `prefixes[i]` cached keys in
/// row `i` of `k` and `v` `[rows, kv_heads, capacity, d]`, as [`Window::after`] shows them.
///
/// # Panics
/// As [`attend`], and where the lengths do not add up to `q`'s.
pub fn attend_packed(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    prefixes: &[usize],
    lens: &[usize],
) -> Tensor<4> {
    assert_eq!(prefixes.len(), lens.len(), "a prefix for every packed row");
    assert_eq!(
        q.dims()[2],
        lens.iter().sum::<usize>(),
        "the packed rows fill the pass"
    );
    let mut first = 0;
    let spans = prefixes
        .iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (&prefix, &count))| {
            first += count;
            Span {
                row: 0,
                first: first - count,
                count,
                cache_row: i,
                keys_from: 0,
                prefix,
            }
        })
        .collect();
    run(q, k, v, group, spans)
}

fn run(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, group: usize, spans: Vec<Span>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as WindowAttention>::window_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        group,
        spans,
    ))
}

/// The extension: a pass's attention, each span of query rows in its window of the cache.
#[backend_extension(Flex)]
trait WindowAttention: Backend {
    /// See [`attend`] and [`attend_packed`].
    fn window_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        group: usize,
        spans: Vec<Span>,
    ) -> FloatTensor<Self>;
}

impl WindowAttention for Flex {
    fn window_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        group: usize,
        spans: Vec<Span>,
    ) -> FlexTensor {
        let what = "window attention: q is [batch, heads, len, d]";
        let ([q, k, v], dims, kv) = attention_operands(q, k, v, what);
        let [batch, heads, len, d] = dims;
        assert!(
            group > 0 && heads % group == 0 && kv.len() == 4,
            "window attention: k {kv:?} for q {dims:?} and group {group}"
        );
        let (rows, kv_heads, capacity) = (kv[0], heads / group, kv[2]);
        assert!(
            kv[1] == kv_heads && kv[3] == d,
            "window attention: k is [rows, heads / group, capacity, d], got {kv:?} for q \
             {dims:?} and group {group}"
        );
        for s in &spans {
            assert!(
                s.row < batch
                    && s.cache_row < rows
                    && s.count > 0
                    && s.first + s.count <= len
                    && s.keys_from + s.prefix + s.count <= capacity,
                "window attention: {s:?} for q {dims:?} and a capacity of {capacity}"
            );
        }
        // Each (row, head)'s output rows: the spans' tasks write disjoint parts of them.
        let mut out = zeros(Shape::from(dims.to_vec()));
        let (qs, ks, vs) = (q.storage::<f32>(), k.storage::<f32>(), v.storage::<f32>());
        let at = Shared(out.storage_mut::<f32>().as_mut_ptr());
        (0..spans.len() * heads).into_par_iter().for_each(|task| {
            let (s, h) = (spans[task / heads], task % heads);
            let kv_head = s.cache_row * kv_heads + h / group;
            let first_key = (kv_head * capacity + s.keys_from) * d;
            let (k, v) = (&ks[first_key..], &vs[first_key..]);
            let first_query = ((s.row * heads + h) * len + s.first) * d;
            let q = &qs[first_query..first_query + s.count * d];
            // SAFETY: the spans' query rows are disjoint (asserted by the callers' shapes:
            // one span a row, or packed rows one after the other), so each task's output
            // rows are its own.
            let out = unsafe { std::slice::from_raw_parts_mut(at.at(first_query), s.count * d) };
            let mut scores = vec![0f32; BLOCK.min(s.count) * (s.prefix + s.count)];
            let mut lse = [0f32; BLOCK];
            for start in (0..s.count).step_by(BLOCK) {
                let rows = BLOCK.min(s.count - start);
                let seen = s.prefix + start + rows;
                let (q, k) = (&q[start * d..][..rows * d], &k[..seen * d]);
                causal_probabilities(
                    q,
                    k,
                    d,
                    s.prefix + start + 1,
                    &mut scores,
                    Lse::Into(&mut lse),
                );
                let block = &scores[..rows * seen];
                // SAFETY: the block's `rows` output rows lie in the span's, the `seen`
                // values within the capacity (asserted above), `block` holds `rows × seen`.
                unsafe { weigh(rows, seen, d, false, &mut out[start * d..], block, v, 1.0) };
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::weigh;

    #[test]
    #[should_panic(expected = "weigh: slices shorter")]
    fn a_product_over_slices_too_short_stops_instead_of_reading_past_them() {
        let (mut dst, p, m) = (vec![0f32; 4], vec![0f32; 4], vec![0f32; 3]);
        // 2×2 probabilities times a 2×2 matrix, but `m` holds 3 numbers.
        // SAFETY: the point of the test is that `weigh` checks its slices itself.
        unsafe { weigh(2, 2, 2, false, &mut dst, &p, &m, 1.0) };
    }
}
