//! Batched generation: prompts of different lengths are left-padded into one batch and
//! prefilled together; then every step decodes one token per unfinished sequence with the
//! KV cache. Finished sequences leave the batch, so the rest run at full speed. Identical
//! prompts (the n chains of one sample) are prefilled once and their cache rows copied.

use super::{Sampler, SamplingParams};
use crate::Pretrained;
use crate::model::{ForwardInput, KvCache};
use agentfly_core::chat::Tokenizer;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop id or stop string.
    Stop,
    /// `max_new_tokens` reached.
    Length,
}

/// The output of one sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The generated ids (a stop id that ended the sequence included).
    pub new_ids: Vec<u32>,
    /// The log-probability of each generated id (see [`Sampler::sample`]).
    pub logprobs: Vec<f32>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
}

fn int_tensor<const D: usize>(
    values: Vec<i64>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn bool_tensor<const D: usize>(
    values: Vec<bool>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Bool> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// A batch that cannot be generated from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A prompt has no tokens.
    #[error("prompt {index} is empty")]
    EmptyPrompt {
        /// Its index in the batch.
        index: usize,
    },
    /// A prompt is longer than the model's context (`max_position_embeddings`).
    #[error("prompt {index} has {len} tokens, more than the model's context of {max}")]
    PromptTooLong {
        /// Its index in the batch.
        index: usize,
        /// Its length.
        len: usize,
        /// The model's context length.
        max: usize,
    },
}

/// Generates a continuation of every prompt. `tokenizer` is needed only for
/// `stop_strings`. A sequence stops with [`FinishReason::Length`] at `max_new_tokens` or
/// when it fills the model's context, whichever comes first.
pub fn generate(
    model: &Pretrained,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Generation>, GenerateError> {
    let context = model.config.max_position_embeddings;
    for (index, prompt) in prompts.iter().enumerate() {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt { index });
        }
        if prompt.len() > context {
            return Err(GenerateError::PromptTooLong {
                index,
                len: prompt.len(),
                max: context,
            });
        }
    }
    let device = model.decoder.embed.val().device();
    let batch = prompts.len();
    let mut outputs: Vec<Generation> = (0..batch)
        .map(|_| Generation {
            new_ids: Vec::new(),
            logprobs: Vec::new(),
            finish_reason: FinishReason::Length,
        })
        .collect();
    // How many tokens each sequence may add: all positions must fit in the context.
    let budget: Vec<usize> = prompts
        .iter()
        .map(|p| params.max_new_tokens.min(context - p.len()))
        .collect();
    if budget.iter().all(|&b| b == 0) {
        return Ok(outputs);
    }
    let mut stop_ids = params.stop_ids.clone();
    if !params.ignore_eos {
        stop_ids.extend(model.eos_ids());
    }
    let mut samplers: Vec<Sampler> = (0..batch).map(|i| Sampler::new(params, i as u64)).collect();

    // Prefill each distinct prompt once, left-padded to the longest.
    let mut unique: Vec<&Vec<u32>> = Vec::new();
    let mut row_of: Vec<i64> = Vec::with_capacity(batch);
    for prompt in prompts {
        let row = match unique.iter().position(|u| *u == prompt) {
            Some(row) => row,
            None => {
                unique.push(prompt);
                unique.len() - 1
            }
        };
        row_of.push(row as i64);
    }
    let len = prompts.iter().map(Vec::len).max().unwrap_or(1);
    let pads: Vec<usize> = prompts.iter().map(|p| len - p.len()).collect();
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
    let mut logits = model.decoder.logits(hidden.narrow(1, len - 1, 1));
    if rows < batch {
        let rows = int_tensor(row_of, [batch], &device);
        cache.select_rows(rows.clone());
        logits = logits.select(0, rows);
    }

    // `active[r]` is the original index of batch row r.
    let mut active: Vec<usize> = (0..batch).collect();
    let mut next_pos: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let vocab = model.config.vocab_size;
    for step in 0..params.max_new_tokens {
        let host: Vec<f32> = logits.into_data().try_to_vec().expect("f32 logits");
        let mut keep = Vec::with_capacity(active.len());
        let mut next_ids = Vec::with_capacity(active.len());
        for (row, &seq) in active.iter().enumerate() {
            if budget[seq] == 0 {
                continue; // its prompt already fills the context
            }
            let (id, logprob) = samplers[seq].sample(&host[row * vocab..(row + 1) * vocab]);
            let out = &mut outputs[seq];
            out.new_ids.push(id);
            out.logprobs.push(logprob);
            let stopped = stop_ids.contains(&id) || hits_stop_string(out, params, tokenizer);
            if stopped {
                out.finish_reason = FinishReason::Stop;
            } else if step + 1 < budget[seq] {
                keep.push(row);
                next_ids.push(id as i64);
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            let rows = int_tensor(
                keep.iter().map(|&r| r as i64).collect(),
                [keep.len()],
                &device,
            );
            cache.select_rows(rows);
            active = keep.iter().map(|&r| active[r]).collect();
        }
        let rows = active.len();
        let keys = cache.len() + 1;
        let positions: Vec<i64> = active.iter().map(|&s| next_pos[s] as i64).collect();
        let mask: Vec<bool> = active
            .iter()
            .flat_map(|&s| {
                let pad = pads[s];
                (0..keys).map(move |k| k < pad)
            })
            .collect();
        let hidden = model.decoder.hidden(
            ForwardInput {
                ids: int_tensor(next_ids, [rows, 1], &device),
                positions: int_tensor(positions, [rows, 1], &device),
                mask: Some(bool_tensor(mask, [rows, 1, 1, keys], &device)),
            },
            &model.rope,
            Some(&mut cache),
        );
        for &s in &active {
            next_pos[s] += 1;
        }
        logits = model.decoder.logits(hidden);
    }
    Ok(outputs)
}

fn hits_stop_string(
    out: &Generation,
    params: &SamplingParams,
    tokenizer: Option<&Tokenizer>,
) -> bool {
    if params.stop_strings.is_empty() {
        return false;
    }
    let Some(tokenizer) = tokenizer else {
        return false;
    };
    // Only the tail can newly contain a stop string: decode the last few tokens.
    let longest = params
        .stop_strings
        .iter()
        .map(|s| s.len())
        .max()
        .unwrap_or(0);
    let tail = &out.new_ids[out.new_ids.len().saturating_sub(longest + 2)..];
    let text = tokenizer.decode(tail, false).unwrap_or_default();
    params
        .stop_strings
        .iter()
        .any(|s| text.contains(s.as_str()))
}
