//! Batched generation: prompts of different lengths are left-padded into one batch and
//! prefilled together; then every step decodes one token per unfinished sequence with the
//! KV cache. Finished sequences leave the batch, so the rest run at full speed, and new
//! sequences can join between steps ([`DecodeBatch`], the engine's continuous batching).
//! Identical prompts (the n chains of one sample) are prefilled once and their cache rows
//! copied.

use super::prefix::PrefixCache;
use super::sampling::{hits_stop_string, sample_rows};
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
    /// The model's logits were not finite (NaN or infinite): no token was sampled.
    NonFinite,
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
    /// The model computed logits that are not finite for a sequence.
    #[error(
        "sequence {index}: the model's logits are not finite (NaN or infinite) after {generated} tokens; the weights are broken"
    )]
    NonFinite {
        /// Its index in the batch.
        index: usize,
        /// Tokens generated before.
        generated: usize,
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

/// One sequence to generate: its prompt, sampler and stops.
#[derive(Debug, Clone)]
pub struct SequenceSpec {
    /// The prompt (already checked non-empty and within the context).
    pub prompt: Vec<u32>,
    /// Its sampler.
    pub sampler: Sampler,
    /// Most new tokens.
    pub max_new_tokens: usize,
    /// Ids that end it (the model's EOS ids included when wanted).
    pub stop_ids: Vec<u32>,
    /// Texts that end it once the decoded output contains them.
    pub stop_strings: Vec<String>,
}

/// A sequence of the batch.
#[derive(Debug)]
struct Row<K> {
    key: K,
    sampler: Sampler,
    /// How many tokens it may add: `max_new_tokens` within the model's context.
    budget: usize,
    stop_ids: Vec<u32>,
    stop_strings: Vec<String>,
    /// Leading cache positions that are padding.
    pad: usize,
    /// The rotary position of its next token.
    next_pos: usize,
    /// Its context (kept to cache its keys and values when it finishes).
    prompt: Vec<u32>,
    out: Generation,
}

/// Sequences decoding together. Sequences join with [`admit`](Self::admit) (prefilled
/// then, cache rows left-padded to the batch's length) and leave when they stop; every
/// [`step`](Self::step) samples one token for each and runs one decode pass.
/// `K` identifies a sequence to the caller.
#[derive(Debug)]
pub struct DecodeBatch<K> {
    cache: KvCache,
    rows: Vec<Row<K>>,
    /// `[rows, vocab]`: the logits each row samples its next token from.
    logits: Option<Tensor<2>>,
    prefix: Option<PrefixCache>,
}

impl<K> Default for DecodeBatch<K> {
    fn default() -> Self {
        Self {
            cache: KvCache::default(),
            rows: Vec::new(),
            logits: None,
            prefix: None,
        }
    }
}

/// Checks that every prompt fits the model.
pub fn check_prompts(model: &Pretrained, prompts: &[Vec<u32>]) -> Result<(), GenerateError> {
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
    Ok(())
}

impl<K> DecodeBatch<K> {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch that keeps the keys and values of up to `positions` cached positions
    /// of earlier contexts (prompts, and finished sequences with what they generated) and
    /// prefills a new sequence only after the longest cached prefix of its context.
    pub fn with_prefix_cache(positions: usize) -> Self {
        Self {
            prefix: (positions > 0).then(|| PrefixCache::new(positions)),
            ..Self::default()
        }
    }

    /// Forgets the cached prefixes (call it when the weights change).
    pub fn clear_prefix_cache(&mut self) {
        if let Some(prefix) = &mut self.prefix {
            prefix.clear();
        }
    }

    /// Prefix-cache hits so far, and the positions they saved from prefilling.
    pub fn prefix_stats(&self) -> (u64, u64) {
        self.prefix.as_ref().map_or((0, 0), |p| (p.hits, p.reused))
    }

    /// Ends every running sequence; returns their keys (the prefix cache is kept).
    pub fn abort(&mut self) -> Vec<K> {
        self.cache = KvCache::default();
        self.logits = None;
        std::mem::take(&mut self.rows)
            .into_iter()
            .map(|r| r.key)
            .collect()
    }

    /// Sequences decoding.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No sequence decoding?
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Cached positions per row (the longest context in the batch, padding included).
    pub fn positions(&self) -> usize {
        self.cache.len()
    }

    /// Prefills `sequences` (checked with [`check_prompts`]) and adds them to the batch.
    /// Returns those that cannot add a single token (their prompt fills the context).
    pub fn admit(
        &mut self,
        model: &Pretrained,
        sequences: Vec<(K, SequenceSpec)>,
    ) -> Vec<(K, Generation)> {
        let context = model.config.max_position_embeddings;
        let mut done = Vec::new();
        let mut misses = Vec::with_capacity(sequences.len());
        let mut hits = Vec::new();
        for (key, spec) in sequences {
            let budget = spec.max_new_tokens.min(context - spec.prompt.len());
            let out = Generation {
                new_ids: Vec::new(),
                logprobs: Vec::new(),
                finish_reason: FinishReason::Length,
            };
            if budget == 0 {
                done.push((key, out));
                continue;
            }
            let found = self.prefix.as_mut().and_then(|p| p.lookup(&spec.prompt));
            let row = Row {
                key,
                sampler: spec.sampler,
                budget,
                stop_ids: spec.stop_ids,
                stop_strings: spec.stop_strings,
                pad: 0,
                next_pos: spec.prompt.len(),
                prompt: spec.prompt,
                out,
            };
            match found {
                Some(past) => hits.push((row, past)),
                None => misses.push(row),
            }
        }
        if !misses.is_empty() {
            let prompts: Vec<&[u32]> = misses.iter().map(|r| r.prompt.as_slice()).collect();
            let (cache, logits, len) = prefill(model, &prompts);
            for (i, row) in misses.iter_mut().enumerate() {
                row.pad = len - row.prompt.len();
                if let Some(prefix) = &mut self.prefix {
                    prefix.insert(row.prompt.clone(), cache.row(i, row.pad, row.prompt.len()));
                }
            }
            self.merge(misses, cache, logits, len);
        }
        for (row, (past, known)) in hits {
            let (cache, logits) = prefill_after(model, past, &row.prompt[known..], known);
            if let Some(prefix) = &mut self.prefix {
                prefix.insert(row.prompt.clone(), cache.clone());
            }
            let len = row.prompt.len();
            self.merge(vec![row], cache, logits, len);
        }
        done
    }

    /// Adds prefilled rows (their cache `len` positions long, leading padding counted in
    /// each row's `pad`) to the batch.
    fn merge(
        &mut self,
        mut joining: Vec<Row<K>>,
        mut cache: KvCache,
        logits: Tensor<2>,
        len: usize,
    ) {
        if self.rows.is_empty() {
            self.cache = cache;
            self.logits = Some(logits);
        } else {
            let have = self.cache.len();
            if have < len {
                self.cache.left_pad(len - have);
                self.rows.iter_mut().for_each(|r| r.pad += len - have);
            } else {
                cache.left_pad(have - len);
                joining.iter_mut().for_each(|r| r.pad += have - len);
            }
            self.cache.append_rows(cache);
            self.logits = self
                .logits
                .take()
                .map(|mine| Tensor::cat(vec![mine, logits], 0));
        }
        self.rows.extend(joining);
    }

    /// Drops the sequences `keep` rejects (their callers went away); returns how many.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) -> usize {
        let kept: Vec<usize> = (0..self.rows.len())
            .filter(|&r| keep(&self.rows[r].key))
            .collect();
        let dropped = self.rows.len() - kept.len();
        if dropped > 0 {
            self.keep_rows(&kept);
        }
        dropped
    }

    fn keep_rows(&mut self, kept: &[usize]) {
        if kept.is_empty() {
            *self = Self::default();
            return;
        }
        let Some(logits) = self.logits.take() else {
            return;
        };
        let device = logits.device();
        let index = int_tensor(
            kept.iter().map(|&r| r as i64).collect(),
            [kept.len()],
            &device,
        );
        self.cache.select_rows(index.clone());
        self.logits = Some(logits.select(0, index));
        let mut rows: Vec<Option<Row<K>>> = std::mem::take(&mut self.rows)
            .into_iter()
            .map(Some)
            .collect();
        self.rows = kept.iter().filter_map(|&r| rows[r].take()).collect();
    }

    /// Samples one token for every sequence; those that stop leave the batch and are
    /// returned; the others run one decode pass. `tokenizer` is needed for stop strings.
    pub fn step(
        &mut self,
        model: &Pretrained,
        tokenizer: Option<&Tokenizer>,
    ) -> Vec<(K, Generation)> {
        let Some(logits) = self.logits.take() else {
            return Vec::new();
        };
        let device = logits.device();
        let vocab = logits.dims()[1];
        let host: Vec<f32> = logits.into_data().try_to_vec().expect("f32 logits");
        let sampled = sample_rows(
            self.rows.iter_mut().map(|row| &mut row.sampler).collect(),
            &host,
            vocab,
        );
        let mut keep = Vec::with_capacity(self.rows.len());
        let mut next_ids = Vec::with_capacity(self.rows.len());
        let mut stopped = vec![false; self.rows.len()];
        for (r, (row, sampled)) in self.rows.iter_mut().zip(sampled).enumerate() {
            let Some((id, logprob)) = sampled else {
                row.out.finish_reason = FinishReason::NonFinite;
                stopped[r] = true;
                continue;
            };
            row.out.new_ids.push(id);
            row.out.logprobs.push(logprob);
            if row.stop_ids.contains(&id)
                || hits_stop_string(&row.out.new_ids, &row.stop_strings, tokenizer)
            {
                row.out.finish_reason = FinishReason::Stop;
                stopped[r] = true;
            } else if row.out.new_ids.len() < row.budget {
                keep.push(r);
                next_ids.push(id as i64);
            } else {
                stopped[r] = true;
            }
        }
        let mut finished = Vec::new();
        if let Some(prefix) = &mut self.prefix {
            // A finished sequence's context and output (all but the last id, which was
            // never fed) are the start of its chain's next context.
            let positions = self.cache.len();
            for (r, row) in
                self.rows.iter().enumerate().filter(|(r, row)| {
                    stopped[*r] && row.out.finish_reason != FinishReason::NonFinite
                })
            {
                let mut tokens = row.prompt.clone();
                tokens.extend_from_slice(&row.out.new_ids[..row.out.new_ids.len() - 1]);
                prefix.insert(tokens, self.cache.row(r, row.pad, positions - row.pad));
            }
        }
        if keep.len() < self.rows.len() {
            // Take the finished rows out, then keep the others' cache rows.
            let rows = std::mem::take(&mut self.rows);
            let mut remaining = Vec::with_capacity(keep.len());
            for (row, stop) in rows.into_iter().zip(stopped) {
                if stop {
                    finished.push((row.key, row.out));
                } else {
                    remaining.push(row);
                }
            }
            self.rows = remaining;
            if keep.is_empty() {
                self.cache = KvCache::default();
                return finished;
            }
            let index = int_tensor(
                keep.iter().map(|&r| r as i64).collect(),
                [keep.len()],
                &device,
            );
            self.cache.select_rows(index);
        }
        let rows = self.rows.len();
        let keys = self.cache.len() + 1;
        let positions: Vec<i64> = self.rows.iter().map(|r| r.next_pos as i64).collect();
        let mask: Vec<bool> = self
            .rows
            .iter()
            .flat_map(|r| (0..keys).map(move |k| k < r.pad))
            .collect();
        let hidden = model.decoder.hidden(
            ForwardInput {
                ids: int_tensor(next_ids, [rows, 1], &device),
                positions: int_tensor(positions, [rows, 1], &device),
                mask: Some(bool_tensor(mask, [rows, 1, 1, keys], &device)),
            },
            &model.rope,
            Some(&mut self.cache),
        );
        for row in &mut self.rows {
            row.next_pos += 1;
        }
        self.logits = Some(model.decoder.logits(hidden).reshape([rows, vocab]));
        finished
    }
}

/// Prefills each distinct prompt once, left-padded to the longest; returns the cache and
/// last-position logits with one row per prompt (shared prompts' rows copied), and the
/// padded length.
fn prefill(model: &Pretrained, prompts: &[&[u32]]) -> (KvCache, Tensor<2>, usize) {
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
fn prefill_after(
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

/// Generates a continuation of every prompt. `tokenizer` is needed only for
/// `stop_strings`. A sequence stops with [`FinishReason::Length`] at `max_new_tokens` or
/// when it fills the model's context, whichever comes first.
pub fn generate(
    model: &Pretrained,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Generation>, GenerateError> {
    check_prompts(model, prompts)?;
    let mut stop_ids = params.stop_ids.clone();
    if !params.ignore_eos {
        stop_ids.extend(model.eos_ids());
    }
    let mut batch = DecodeBatch::new();
    let sequences = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            let spec = SequenceSpec {
                prompt: prompt.clone(),
                sampler: Sampler::new(params, i as u64),
                max_new_tokens: params.max_new_tokens,
                stop_ids: stop_ids.clone(),
                stop_strings: params.stop_strings.clone(),
            };
            (i, spec)
        })
        .collect();
    let mut outputs: Vec<Option<Generation>> = vec![None; prompts.len()];
    let mut collect = |done: Vec<(usize, Generation)>| {
        for (i, generation) in done {
            outputs[i] = Some(generation);
        }
    };
    collect(batch.admit(model, sequences));
    while !batch.is_empty() {
        collect(batch.step(model, tokenizer));
    }
    let outputs: Vec<Generation> = outputs
        .into_iter()
        .map(|g| g.expect("every sequence finishes"))
        .collect();
    if let Some((index, g)) = outputs
        .iter()
        .enumerate()
        .find(|(_, g)| g.finish_reason == FinishReason::NonFinite)
    {
        return Err(GenerateError::NonFinite {
            index,
            generated: g.new_ids.len(),
        });
    }
    Ok(outputs)
}
