//! Prefilling: prompts of different lengths left-padded into one pass, and contexts
//! after cached prefixes of them in one pass, packed (on the CPU) or right-padded.

use agentfly_model::Pretrained;
use agentfly_model::model::{ForwardInput, KvCache, Window, decode_attention};
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

/// Whether [`prefill_after`] packs its rows: on the CPU (the plain flex device).
pub(super) fn packs(model: &Pretrained) -> bool {
    decode_attention::all_served(&[&model.decoder.embed.val()])
}

/// Prefills each context of `rows` after its cached prefix, all in one pass: row `i` of
/// the returned (ragged) cache holds context `i` at positions `0..start + tokens.len()`,
/// and row `i` of the logits its last position's. On the CPU the rows' tokens are packed
/// into the pass's one row, one after the other ([`KvCache::write_packed`]); elsewhere they
/// are right-padded to the longest (past a row's context its cache then holds the
/// padding's keys), a padding query seeing its row's keys up to itself, its output never
/// read.
pub(super) fn prefill_after(model: &Pretrained, rows: Vec<After<'_>>) -> (KvCache, Tensor<2>) {
    let device = model.decoder.embed.val().device();
    let packed = packs(model);
    let n = rows.len();
    let starts: Vec<usize> = rows.iter().map(|r| r.start).collect();
    let tokens: Vec<&[u32]> = rows.iter().map(|r| r.tokens).collect();
    let lens: Vec<usize> = tokens.iter().map(|t| t.len()).collect();
    let len = lens.iter().copied().max().unwrap_or(1);
    let keys = if packed {
        starts
            .iter()
            .zip(&lens)
            .map(|(s, l)| s + l)
            .max()
            .unwrap_or(1)
    } else {
        starts.iter().max().copied().unwrap_or(0) + len
    };
    let mut cache = KvCache::stack_rows(rows.into_iter().map(|r| (r.past, r.start)), keys);
    let last = model.config.max_position_embeddings.saturating_sub(1);
    // Each row's tokens (padded to `padded(len)` with zeros), their positions, and where in
    // the pass its last token sits.
    let padded = |l: usize| if packed { l } else { len };
    let (mut ids, mut positions, mut ends) = (Vec::new(), Vec::new(), Vec::with_capacity(n));
    for (&start, tokens) in starts.iter().zip(&tokens) {
        let w = padded(tokens.len());
        ids.extend((0..w).map(|j| tokens.get(j).map_or(0, |&t| i64::from(t))));
        // A padding query's position only rotates its own (unread) key and query.
        positions.extend((start..start + w).map(|p| p.min(last) as i64));
        ends.push((ids.len() - w + tokens.len() - 1) as i64);
    }
    let windows = Some(starts.iter().map(|&start| Window::after(start)).collect());
    let shape = if packed { [1, ids.len()] } else { [n, len] };
    if packed {
        cache.write_packed(starts, lens);
    } else {
        cache.write_at(starts);
    }
    let hidden = model.decoder.hidden(
        ForwardInput {
            ids: int_tensor(ids, shape, &device),
            positions: int_tensor(positions, shape, &device),
            windows,
        },
        &model.rope,
        Some(&mut cache),
    );
    let width = hidden.dims()[2];
    let last_rows = hidden
        .reshape([shape[0] * shape[1], width])
        .select(0, int_tensor(ends, [n], &device))
        .reshape([n, 1, width]);
    let vocab = model.config.vocab_size;
    let logits = model.decoder.logits(last_rows).reshape([n, vocab]);
    (cache, logits)
}
