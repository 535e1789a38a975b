//! Prefilling: prompts of different lengths left-padded into one pass, and a context
//! after a cached prefix of it.

use crate::Pretrained;
use crate::model::{ForwardInput, KvCache};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

pub(super) fn int_tensor<const D: usize>(
    values: Vec<i64>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

pub(super) fn bool_tensor<const D: usize>(
    values: Vec<bool>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Bool> {
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
    let mut mask = Vec::with_capacity(rows * len * len);
    for prompt in &unique {
        let pad = len - prompt.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(prompt.iter().map(|&t| t as i64)));
        positions.extend((0..len).map(|i| i.saturating_sub(pad) as i64));
        for q in 0..len {
            // A padding query still sees itself, so no row of the softmax is empty.
            mask.extend((0..len).map(|k| k > q || (k < pad && k != q)));
        }
    }
    let mut cache = KvCache::new(model.config.num_hidden_layers);
    let hidden = model.decoder.hidden(
        ForwardInput {
            ids: int_tensor(ids, [rows, len], &device),
            positions: int_tensor(positions, [rows, len], &device),
            mask: Some(bool_tensor(mask, [rows, 1, len, len], &device)),
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

/// Prefills `tokens` after a cached `past` of `start` positions (one row, no padding):
/// returns the row's whole cache and the logits of its last position.
pub(super) fn prefill_after(
    model: &Pretrained,
    mut past: KvCache,
    tokens: &[u32],
    start: usize,
) -> (KvCache, Tensor<2>) {
    let device = model.decoder.embed.val().device();
    let len = tokens.len();
    let keys = start + len;
    let mask: Vec<bool> = (0..len)
        .flat_map(|q| (0..keys).map(move |k| k > start + q))
        .collect();
    let hidden = model.decoder.hidden(
        ForwardInput {
            ids: int_tensor(
                tokens.iter().map(|&t| i64::from(t)).collect(),
                [1, len],
                &device,
            ),
            positions: int_tensor((start..keys).map(|p| p as i64).collect(), [1, len], &device),
            mask: Some(bool_tensor(mask, [1, 1, len, keys], &device)),
        },
        &model.rope,
        Some(&mut past),
    );
    let vocab = model.config.vocab_size;
    let logits = model
        .decoder
        .logits(hidden.narrow(1, len - 1, 1))
        .reshape([1, vocab]);
    (past, logits)
}
