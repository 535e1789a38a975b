//! Causal self-attention for passes without a cache (training, scoring), one block of query
//! rows at a time, optionally after keys and values that every query row sees (a prefix
//! shared by the batch's rows, [`super::Decoder::hidden_after_prefix`]); and the engine's
//! passes with a cache — padded prompts, turns after cached prefixes, decode steps — as a
//! causal window of each row ([`Window`], [`attend`]).

use super::window_attention::{self, Window};
use super::{decode_attention, fused_attention};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Tensor, TensorData};

/// Attention of each row of `q` `[batch, heads, len, d]` to the keys its [`Window`] shows
/// of `k` and `v` `[batch, kv_heads, keys, d]` (a cache's whole buffers, positions past
/// the windows unused). On the CPU a decode step takes [`decode_attention::attend`] and a
/// longer pass [`window_attention::attend`] ([`windowed`] under autodiff); other backends
/// take [`masked`]. With `packed` lengths (a pass on the CPU whose one row holds every
/// row's queries one after the other, [`KvCache::write_packed`](super::KvCache)), row `i`
/// of the cache is attended to by the next `packed[i]` query rows, in its window.
pub(super) fn attend(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    windows: &[Window],
    packed: Option<&[usize]>,
) -> Tensor<4> {
    if let Some(lens) = packed {
        assert!(
            windows.iter().all(|w| *w == Window::after(w.prefix)),
            "a packed pass's rows follow their cached prefixes"
        );
        let prefixes: Vec<usize> = windows.iter().map(|w| w.prefix).collect();
        return window_attention::attend_packed(q, k, v, group, &prefixes, lens);
    }
    let [batch, heads, len, hd] = q.dims();
    assert_eq!(windows.len(), batch, "one window per row");
    let device = q.device();
    if len > 1 && decode_attention::all_served(&[&q, &k, &v]) {
        return window_attention::attend(q, k, v, group, windows);
    }
    if len > 1 && fused_attention::serves(&device) {
        return windowed(q, k, v, group, windows);
    }
    let prefixes = windows.iter().all(|w| *w == Window::after(w.prefix));
    if len == 1 && prefixes && decode_attention::all_served(&[&q, &k, &v]) {
        let q = q.reshape([batch, heads / group, group, hd]);
        let lengths = windows.iter().map(|w| w.prefix + 1).collect();
        return decode_attention::attend(q, k, v, lengths).reshape([batch, heads, 1, hd]);
    }
    masked(q, k, v, group, windows)
}

/// [`attend`] through Burn's attention, the windows made a mask: the query heads that
/// share a key/value head stacked as rows, so that keys and values are never copied per
/// head.
fn masked(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, group: usize, windows: &[Window]) -> Tensor<4> {
    let [batch, heads, len, hd] = q.dims();
    let kv_heads = heads / group;
    let q = q.reshape([batch, kv_heads, group * len, hd]);
    let keys = k.dims()[2];
    let hidden: Vec<bool> = windows
        .iter()
        .flat_map(|w| (0..len).flat_map(move |q| (0..keys).map(move |c| !w.sees(q, c))))
        .collect();
    let mask = TensorData::new(hidden, [batch, 1, 1, len, keys]);
    let mask = Tensor::<5, Bool>::from_data(mask, &q.device())
        .expand([batch, kv_heads, group, len, keys])
        .reshape([batch, kv_heads, group * len, keys]);
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: false,
    };
    attention(q, k, v, Some(mask), None, options).reshape([batch, heads, len, hd])
}

/// Attention of each row of `q` `[batch, heads, len, d]` in its [`Window`] of `k` and `v`
/// `[batch, kv_heads, capacity, d]`, one fused causal operation a row; padding query rows
/// get zeros.
///
/// # Panics
/// Unless [`fused_attention::serves`] says yes for the tensors' device, or where a window
/// reaches past the capacity.
fn windowed(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    windows: &[Window],
) -> Tensor<4> {
    let [batch, heads, len, hd] = q.dims();
    assert_eq!(windows.len(), batch, "one window per row");
    let outs = windows.iter().enumerate().map(|(i, w)| {
        let rows = len - w.queries_from;
        let keys = |t: &Tensor<4>| {
            t.clone()
                .narrow(0, i, 1)
                .narrow(2, w.keys_from, w.prefix + rows)
        };
        let q = q.clone().narrow(0, i, 1).narrow(2, w.queries_from, rows);
        let out = fused_attention::causal(q, keys(&k), keys(&v), group, w.prefix);
        if w.queries_from == 0 {
            return out;
        }
        let padding = Tensor::zeros([1, heads, w.queries_from, hd], &out.device());
        Tensor::cat(vec![padding, out], 2)
    });
    Tensor::cat(outs.collect(), 0)
}

/// Query rows per block of [`causal_attention`].
const ATTENTION_BLOCK: usize = 128;

/// Causal self-attention without a cache: `q` `[batch, heads, len, d]`, `k` and `v`
/// `[batch, kv_heads, prefix + len, d]`, where the first `prefix` keys are seen by every
/// query row and query row `i` sits at key position `prefix + i`. One block of query rows
/// at a time: block `i` attends only to the keys up to its last row, so the scores cover
/// about half the `len × len` square instead of all of it, and only the block's own square
/// needs the causal mask. Under autodiff, where Burn's fused attention is not available,
/// this halves the largest tensors of a training step (scores and probabilities, kept for
/// the backward pass) and the passes over them. The query heads that share a key/value
/// head are stacked as query rows, so keys and values are never copied per head.
///
/// On the CPU, [`super::fused_attention`] does the same as one operation with its own
/// backward pass; these blocks of Burn operations serve the other backends.
///
/// With `spans` (summing to `len`), the rows hold sequences laid end to end: a query row
/// sees the prefix and its own run of positions up to itself
/// ([`fused_attention::causal_spans`]).
pub(super) fn causal_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    prefix: usize,
    spans: Option<&[usize]>,
) -> Tensor<4> {
    let whole = [q.dims()[2]];
    let spans = spans.unwrap_or(&whole);
    if fused_attention::serves(&q.device()) {
        return fused_attention::causal_spans(q, k, v, group, prefix, spans);
    }
    if spans.len() == 1 {
        return blocked(q, k, v, group, prefix);
    }
    // Other backends: each run on its own, after the prefix's keys and values.
    span_by_span(q, k, v, group, prefix, spans, blocked)
}

/// `attend` (a causal attention after a prefix) run on each of `spans`' runs of `q`'s rows
/// alone, with the prefix's keys and values and the run's own, the outputs joined again:
/// what [`causal_attention`] with spans computes.
pub(super) fn span_by_span(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    prefix: usize,
    spans: &[usize],
    attend: fn(Tensor<4>, Tensor<4>, Tensor<4>, usize, usize) -> Tensor<4>,
) -> Tensor<4> {
    let mut outs = Vec::with_capacity(spans.len());
    let mut at = 0;
    for &n in spans {
        let own = |t: &Tensor<4>| {
            let run = t.clone().narrow(2, prefix + at, n);
            if prefix == 0 {
                run
            } else {
                Tensor::cat(vec![t.clone().narrow(2, 0, prefix), run], 2)
            }
        };
        outs.push(attend(
            q.clone().narrow(2, at, n),
            own(&k),
            own(&v),
            group,
            prefix,
        ));
        at += n;
    }
    Tensor::cat(outs, 2)
}

/// [`causal_attention`] in blocks of Burn operations.
pub(super) fn blocked(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    group: usize,
    prefix: usize,
) -> Tensor<4> {
    let [batch, heads, len, hd] = q.dims();
    debug_assert_eq!(k.dims()[2], prefix + len);
    let kv_heads = heads / group;
    let device = q.device();
    let q = q * (1.0 / (hd as f64).sqrt());
    let mut outs = Vec::with_capacity(len.div_ceil(ATTENTION_BLOCK));
    let mut start = 0;
    while start < len {
        let rows = ATTENTION_BLOCK.min(len - start);
        let end = start + rows;
        let seen = prefix + end;
        let q_block = q
            .clone()
            .narrow(2, start, rows)
            .reshape([batch, kv_heads, group * rows, hd]);
        let keys = k.clone().narrow(2, 0, seen);
        let scores = q_block.matmul(keys.swap_dims(2, 3));
        // Row r (query start + r) may see keys 0..=prefix + start + r.
        let bias: Vec<f32> = (0..group * rows)
            .flat_map(|i| {
                let r = i % rows;
                (0..seen).map(move |c| {
                    if c > prefix + start + r {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        let bias = Tensor::<2>::from_data(TensorData::new(bias, [group * rows, seen]), &device)
            .unsqueeze_dims::<4>(&[0, 1]);
        let probs = softmax(scores + bias, 3);
        let out = probs.matmul(v.clone().narrow(2, 0, seen));
        outs.push(out.reshape([batch, heads, rows, hd]));
        start = end;
    }
    Tensor::cat(outs, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Bool, Device, Distribution};

    /// Keys and values repeated per query head, for the reference attention.
    fn repeat(t: Tensor<4>, group: usize) -> Tensor<4> {
        let [b, kv, len, d] = t.dims();
        t.unsqueeze_dim::<5>(2)
            .expand([b, kv, group, len, d])
            .reshape([b, kv * group, len, d])
    }

    /// Burn's own causal attention over the whole square.
    fn reference(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, group: usize) -> Tensor<4> {
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: true,
        };
        attention(q, repeat(k, group), repeat(v, group), None, None, options)
    }

    #[test]
    fn blocked_causal_attention_equals_the_masked_square() {
        let device = Device::flex();
        // Three blocks, the last one partial; three query heads per key/value head.
        let (batch, kv, group, len, d) = (2, 2, 3, 2 * ATTENTION_BLOCK + 37, 16);
        let normal = Distribution::Normal(0.0, 1.0);
        let q = Tensor::<4>::random([batch, kv * group, len, d], normal, &device);
        let k = Tensor::<4>::random([batch, kv, len, d], normal, &device);
        let v = Tensor::<4>::random([batch, kv, len, d], normal, &device);
        let want = reference(q.clone(), k.clone(), v.clone(), group);
        let got = causal_attention(q, k, v, group, 0, None);
        let diff = (got - want).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-5, "largest difference {diff}");
    }

    #[test]
    fn queries_after_a_prefix_equal_the_same_rows_of_the_whole_pass() {
        let device = Device::flex();
        let (batch, kv, group, prefix, len, d) = (2, 2, 3, 45, ATTENTION_BLOCK + 20, 16);
        let normal = Distribution::Normal(0.0, 1.0);
        let q = Tensor::<4>::random([batch, kv * group, prefix + len, d], normal, &device);
        let k = Tensor::<4>::random([batch, kv, prefix + len, d], normal, &device);
        let v = Tensor::<4>::random([batch, kv, prefix + len, d], normal, &device);
        let want = reference(q.clone(), k.clone(), v.clone(), group).narrow(2, prefix, len);
        let got = causal_attention(q.narrow(2, prefix, len), k, v, group, prefix, None);
        let diff = (got - want).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-5, "largest difference {diff}");
    }

    /// Burn's attention with the mask that each row's window stands for, written out
    /// independently of [`Window::sees`]: query row `i` sees keys `keys_from..=keys_from +
    /// prefix + i - queries_from`, a padding query row only the key at its own position.
    fn masked_reference(
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        group: usize,
        windows: &[Window],
    ) -> Tensor<4> {
        let [batch, heads, len, _] = q.dims();
        let capacity = k.dims()[2];
        let hidden: Vec<bool> = windows
            .iter()
            .flat_map(|w| {
                (0..len).flat_map(move |i| {
                    let seen = move |c: usize| match i.checked_sub(w.queries_from) {
                        Some(r) => c >= w.keys_from && c <= w.keys_from + w.prefix + r,
                        None => c + w.queries_from == w.keys_from + w.prefix + i,
                    };
                    (0..capacity).map(move |c| !seen(c))
                })
            })
            .collect();
        let mask = TensorData::new(hidden, [batch, 1, len, capacity]);
        let mask = Tensor::<4, Bool>::from_data(mask, &q.device());
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: false,
        };
        let mask = mask.expand([batch, heads, len, capacity]);
        attention(
            q,
            repeat(k, group),
            repeat(v, group),
            Some(mask),
            None,
            options,
        )
    }

    /// `attend` (the CPU's own operations) and `masked` (Burn's attention, as other
    /// backends run it) against the reference, on every row's real query rows.
    fn attend_equals_the_masked_reference(windows: &[Window], len: usize) {
        let device = Device::flex();
        let (kv, group, capacity, d) = (2, 3, 200, 16);
        let batch = windows.len();
        let normal = Distribution::Normal(0.0, 1.0);
        let q = Tensor::<4>::random([batch, kv * group, len, d], normal, &device);
        let k = Tensor::<4>::random([batch, kv, capacity, d], normal, &device);
        let v = Tensor::<4>::random([batch, kv, capacity, d], normal, &device);
        let want = masked_reference(q.clone(), k.clone(), v.clone(), group, windows);
        type Attend = fn(Tensor<4>, Tensor<4>, Tensor<4>, usize, &[Window]) -> Tensor<4>;
        let ways: [(&str, Attend); 3] = [
            ("attend", |q, k, v, g, w| attend(q, k, v, g, w, None)),
            ("windowed", windowed),
            ("masked", masked),
        ];
        for (name, way) in ways {
            let got = way(q.clone(), k.clone(), v.clone(), group, windows);
            for (i, w) in windows.iter().enumerate() {
                let rows = len - w.queries_from;
                let part =
                    |t: &Tensor<4>| t.clone().narrow(0, i, 1).narrow(2, w.queries_from, rows);
                let diff = (part(&got) - part(&want)).abs().max().into_scalar::<f32>();
                assert!(diff < 1e-5, "{name}, row {i}: largest difference {diff}");
            }
        }
    }

    fn windows(rows: &[(usize, usize, usize)]) -> Vec<Window> {
        rows.iter()
            .map(|&(queries_from, keys_from, prefix)| Window {
                queries_from,
                keys_from,
                prefix,
            })
            .collect()
    }

    #[test]
    fn windowed_rows_equal_the_masked_pass_they_stand_for() {
        // A left-padded first prompt, a row after 57 cached keys, an unpadded prompt.
        attend_equals_the_masked_reference(&windows(&[(5, 5, 0), (0, 0, 57), (0, 0, 0)]), 70);
    }

    #[test]
    fn a_packed_pass_equals_the_padded_pass_row_by_row() {
        let device = Device::flex();
        let (kv, group, capacity, d) = (2, 3, 200, 16);
        // A turn after 57 cached keys, a prompt over two blocks, one token after 120.
        let (prefixes, lens) = ([57, 0, 120], [5, 70, 1]);
        let normal = Distribution::Normal(0.0, 1.0);
        let q = Tensor::<4>::random([3, kv * group, 70, d], normal, &device);
        let k = Tensor::<4>::random([3, kv, capacity, d], normal, &device);
        let v = Tensor::<4>::random([3, kv, capacity, d], normal, &device);
        let windows: Vec<Window> = prefixes.iter().map(|&p| Window::after(p)).collect();
        let padded = attend(q.clone(), k.clone(), v.clone(), group, &windows, None);
        let rows = |t: &Tensor<4>| -> Vec<Tensor<4>> {
            (0..3)
                .map(|i| t.clone().narrow(0, i, 1).narrow(2, 0, lens[i]))
                .collect()
        };
        let packed_q = Tensor::cat(rows(&q), 2);
        let packed = attend(packed_q, k, v, group, &windows, Some(&lens));
        let diff = (packed - Tensor::cat(rows(&padded), 2))
            .abs()
            .max()
            .into_scalar::<f32>();
        assert!(diff < 1e-6, "largest difference {diff}");
    }

    #[test]
    fn a_decode_step_sees_each_rows_prefix_of_the_cache() {
        // A free slot (its one key), rows deep into the cache, one at its last position.
        let steps = windows(&[(0, 0, 0), (0, 0, 63), (0, 0, 150), (0, 0, 199)]);
        attend_equals_the_masked_reference(&steps, 1);
    }

    #[test]
    fn a_padding_query_sees_only_its_own_key() {
        let w = windows(&[(3, 3, 0)])[0];
        assert!((0..10).all(|c| w.sees(1, c) == (c == 1)));
        assert!((0..10).all(|c| w.sees(4, c) == (3..=4).contains(&c)));
    }
}
