//! Prefilling: prompts of different lengths left-padded into one pass, and contexts
//! after cached prefixes of them, right-padded into one pass.

use crate::Pretrained;
use crate::model::{ForwardInput, KvCache, Window};
use burn::tensor::{Device, Int, Tensor, TensorData};

pub(super) fn int_tensor<const D: usize>(
    values: Vec<i64>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// Prefills each distinct prompt once, left-padded to the longest; returns the cache and
/// last-position logits with one row per prompt (shared prompts' rows copied), and the
/// padded length.
pub(super) fn prefill(model: &Pretrained, prompts: &[&[u32]]) -> (KvCache, Tensor<2>, usize) {
    let device = model.decoder.embed.val().device();
    let mut unique: Vec<&[u32]> = Vec::new();
    let mut row_of: Vec<i64> = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let row = match unique.iter().position(|u| u == prompt) {
            Some(row) => row,
            None => {
                unique.push(prompt);
                unique.len() - 1
            }
        };
        row_of.push(row as i64);
    }
    let len = prompts.iter().map(|p| p.len()).max().unwrap_or(1);
    let rows = unique.len();
    let mut ids = Vec::with_capacity(rows * len);
    let mut positions = Vec::with_capacity(rows * len);
    let mut windows = Vec::with_capacity(rows);
    for prompt in &unique {
        let pad = len - prompt.len();
        windows.push(Window {
            queries_from: pad,
            keys_from: pad,
            prefix: 0,
        });
        ids.extend(std::iter::repeat_n(0, pad).chain(prompt.iter().map(|&t| t as i64)));
        positions.extend((0..len).map(|i| i.saturating_sub(pad) as i64));
    }
    let mut cache = KvCache::new(model.config.num_hidden_layers);
    let hidden = model.decoder.hidden(
        ForwardInput {
            ids: int_tensor(ids, [rows, len], &device),
            positions: int_tensor(positions, [rows, len], &device),
            windows: Some(windows),
        },
        &model.rope,
        Some(&mut cache),
    );
    let vocab = model.config.vocab_size;
    let mut logits = model
        .decoder
        .logits(hidden.narrow(1, len - 1, 1))
        .reshape([rows, vocab]);
    if rows < prompts.len() {
        let index = int_tensor(row_of, [prompts.len()], &device);
        cache.select_rows(index.clone());
        logits = logits.select(0, index);
    }
    (cache, logits, len)
}

/// A context to prefill after a cached prefix of it: the prefix's keys and values (one
/// aligned row of `start` positions) and the tokens after it.
pub(super) struct After<'a> {
    /// The cached prefix's keys and values.
    pub past: KvCache,
    /// Its length.
    pub start: usize,
    /// The context's tokens after it (at least one).
    pub tokens: &'a [u32],
}

/// Prefills each context of `rows` after its cached prefix, all in one pass: row `i` of
/// the returned (ragged) cache holds context `i` at positions `0..start + tokens.len()`
/// (past that, the padding's keys), and row `i` of the logits its last position's. The
/// rows' tokens are right-padded to the longest; a padding query sees its row's keys up to
/// itself, and its output is never read.
pub(super) fn prefill_after(model: &Pretrained, rows: Vec<After<'_>>) -> (KvCache, Tensor<2>) {
    let device = model.decoder.embed.val().device();
    let n = rows.len();
    let len = rows.iter().map(|r| r.tokens.len()).max().unwrap_or(1);
    let starts: Vec<usize> = rows.iter().map(|r| r.start).collect();
    let tokens: Vec<&[u32]> = rows.iter().map(|r| r.tokens).collect();
    let keys = starts.iter().max().copied().unwrap_or(0) + len;
    let mut cache = KvCache::stack_rows(rows.into_iter().map(|r| (r.past, r.start)), keys);
    let last = model.config.max_position_embeddings.saturating_sub(1);
    let mut ids = Vec::with_capacity(n * len);
    let mut positions = Vec::with_capacity(n * len);
    let mut ends = Vec::with_capacity(n);
    for (i, (&start, tokens)) in starts.iter().zip(tokens).enumerate() {
        ids.extend((0..len).map(|j| tokens.get(j).map_or(0, |&t| i64::from(t))));
        // A padding query's position only rotates its own (unread) key and query.
        positions.extend((start..start + len).map(|p| p.min(last) as i64));
        ends.push((i * len + tokens.len() - 1) as i64);
    }
    let windows = Some(starts.iter().map(|&start| Window::after(start)).collect());
    cache.write_at(starts);
    let hidden = model.decoder.hidden(
        ForwardInput {
            ids: int_tensor(ids, [n, len], &device),
            positions: int_tensor(positions, [n, len], &device),
            windows,
        },
        &model.rope,
        Some(&mut cache),
    );
    let width = hidden.dims()[2];
    let last_rows = hidden
        .reshape([n * len, width])
        .select(0, int_tensor(ends, [n], &device))
        .reshape([n, 1, width]);
    let vocab = model.config.vocab_size;
    let logits = model.decoder.logits(last_rows).reshape([n, vocab]);
    (cache, logits)
}
