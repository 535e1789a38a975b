//! Batched generation: prompts of different lengths are left-padded into one batch and
//! prefilled together; then every step decodes one token per unfinished sequence with the
//! KV cache. Finished sequences leave the batch, so the rest run at full speed, and new
//! sequences can join between steps ([`DecodeBatch`], the engine's continuous batching).
//! Identical prompts (the n chains of one sample) are prefilled once and their cache rows
//! copied.

use super::device_sampling::{reduces_on_device, sample_on_device};
use super::pool::on_pool;
use super::prefill::{After, int_tensor, packs, prefill, prefill_after};
use super::prefix::PrefixCache;
use super::sampling::{Sampler, hits_stop_string, sample_rows};
use agentfly_core::chat::Tokenizer;
use agentfly_model::Pretrained;
use agentfly_model::model::{ForwardInput, KvCache, Window};
use burn::tensor::{Device, Tensor};
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
    /// The position of its next token: where it is written in its slot of the cache, and
    /// its rotary position (every cached position before it is the row's own).
    next_pos: usize,
    /// Its context (kept to cache its keys and values when it finishes).
    prompt: Vec<u32>,
    out: Generation,
}

/// Sequences decoding together. Sequences join with [`admit`](Self::admit) (prefilled
/// then, each copied into a free slot of the batch's cache) and leave when they stop,
/// freeing their slot; every [`step`](Self::step) samples one token for each and runs
/// one decode pass. The cache is ragged (see [`KvCache`]): joining and leaving copy only
/// the row concerned, however long the others' contexts. A free slot is decoded along
/// (its output unused) until a sequence joins into it; when more than a quarter of the
/// slots are free, the batch is compacted (on the CPU its rows move down within the
/// cache's buffers, whose room later joiners reuse). `K` identifies a sequence to the caller.
#[derive(Debug)]
pub struct DecodeBatch<K> {
    cache: KvCache,
    /// The sequences by slot of the cache; `None` is a free slot.
    slots: Vec<Option<Row<K>>>,
    /// `[slots, vocab]`: the logits each slot samples its next token from.
    logits: Option<Tensor<2>>,
    prefix: Option<PrefixCache>,
}

impl<K> Default for DecodeBatch<K> {
    fn default() -> Self {
        Self {
            cache: KvCache::default(),
            slots: Vec::new(),
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
        std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .map(|r| r.key)
            .collect()
    }

    /// Sequences decoding.
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// No sequence decoding?
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Slots of the cache, free ones included: the rows a decode pass computes.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The longest context in the batch (cached positions of its longest row).
    pub fn positions(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|r| r.next_pos)
            .max()
            .unwrap_or(0)
    }

    /// Prefills `sequences` (checked with [`check_prompts`]) and adds them to the batch.
    /// Returns those that cannot add a single token (their prompt fills the context).
    pub fn admit(
        &mut self,
        model: &Pretrained,
        sequences: Vec<(K, SequenceSpec)>,
    ) -> Vec<(K, Generation)>
    where
        K: Send,
    {
        on_pool(|| self.admit_here(model, sequences))
    }

    fn admit_here(
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
            let pads: Vec<usize> = misses.iter().map(|r| len - r.prompt.len()).collect();
            if let Some(prefix) = &mut self.prefix {
                for (i, (row, &pad)) in misses.iter().zip(&pads).enumerate() {
                    prefix.insert(row.prompt.clone(), cache.row(i, pad, row.prompt.len()));
                }
            }
            self.merge(misses, &cache, &pads, logits);
        }
        // On the CPU a pass after cached prefixes packs its rows without padding: one pass.
        let groups = if packs(model) {
            vec![hits]
        } else {
            padding_groups(hits)
        };
        for group in groups.into_iter().filter(|g| !g.is_empty()) {
            let after = group
                .iter()
                .map(|(row, (past, known))| After {
                    past: past.clone(),
                    start: *known,
                    tokens: &row.prompt[*known..],
                })
                .collect();
            let (cache, logits) = prefill_after(model, after);
            let rows: Vec<Row<K>> = group.into_iter().map(|(row, _)| row).collect();
            if let Some(prefix) = &mut self.prefix {
                for (i, row) in rows.iter().enumerate() {
                    prefix.insert(row.prompt.clone(), cache.row(i, 0, row.prompt.len()));
                }
            }
            let pads = vec![0; rows.len()];
            self.merge(rows, &cache, &pads, logits);
        }
        done
    }

    /// Adds prefilled rows to the batch: row `i` of `cache` holds `joining[i]`'s context
    /// after `pads[i]` positions of padding, and row `i` of `logits` its next token's
    /// logits. Each goes into a free slot, or a new one.
    fn merge(&mut self, joining: Vec<Row<K>>, cache: &KvCache, pads: &[usize], logits: Tensor<2>) {
        if self.slots.is_empty() {
            // The prefilled rows become the batch, each moved to start at position 0.
            self.cache = cache.clone();
            for (i, (row, &pad)) in joining.iter().zip(pads).enumerate() {
                if pad > 0 {
                    self.cache.write_row(i, cache, i, pad, row.prompt.len());
                }
            }
            self.logits = Some(logits);
            self.slots = joining.into_iter().map(Some).collect();
            return;
        }
        let free: Vec<usize> = (0..self.slots.len())
            .filter(|&s| self.slots[s].is_none())
            .take(joining.len())
            .collect();
        let extra = joining.len() - free.len();
        let mut all = self.logits.take().expect("a running batch has logits");
        let vocab = all.dims()[1];
        if extra > 0 {
            self.cache.add_rows(extra);
            let zeros = Tensor::zeros([extra, vocab], &all.device());
            all = Tensor::cat(vec![all, zeros], 0);
            self.slots.extend((0..extra).map(|_| None));
        }
        let targets = free
            .into_iter()
            .chain(self.slots.len() - extra..self.slots.len());
        for (i, ((row, slot), &pad)) in joining.into_iter().zip(targets).zip(pads).enumerate() {
            self.cache.write_row(slot, cache, i, pad, row.prompt.len());
            let mine = logits.clone().narrow(0, i, 1);
            all = all.slice_assign([slot..slot + 1, 0..vocab], mine);
            self.slots[slot] = Some(row);
        }
        self.logits = Some(all);
    }

    /// Drops the sequences `keep` rejects (their callers went away); returns how many.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) -> usize {
        let mut dropped = 0;
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|row| !keep(&row.key)) {
                *slot = None;
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.compact_if_sparse(Vec::new());
        }
        dropped
    }

    /// Frees every slot once no sequence is left; compacts the batch when more than a
    /// quarter of its slots are free (moving the rows kept down). Returns `per_slot` (when
    /// given) in the new order of the slots.
    fn compact_if_sparse(&mut self, per_slot: Vec<i64>) -> Vec<i64> {
        let live = self.len();
        if live == 0 {
            *self = Self {
                prefix: self.prefix.take(),
                ..Self::default()
            };
            return Vec::new();
        }
        if 4 * (self.slots.len() - live) <= self.slots.len() {
            return per_slot;
        }
        let kept = self.live_slots();
        let device = self.cache_device();
        let index = int_tensor(kept.iter().map(|&s| s as i64).collect(), [live], &device);
        self.cache.keep_rows(&kept);
        self.logits = self.logits.take().map(|l| l.select(0, index));
        let mut slots = std::mem::take(&mut self.slots);
        self.slots = kept.iter().map(|&s| slots[s].take()).collect();
        if per_slot.is_empty() {
            return per_slot;
        }
        kept.iter().map(|&s| per_slot[s]).collect()
    }

    /// The slots holding a sequence, in order.
    fn live_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&s| self.slots[s].is_some())
            .collect()
    }

    fn cache_device(&self) -> Device {
        self.logits
            .as_ref()
            .map(Tensor::device)
            .or_else(|| self.cache.device())
            .expect("a batch with sequences has a cache")
    }

    /// Samples one token for every sequence; those that stop leave the batch and are
    /// returned; the others run one decode pass. `tokenizer` is needed for stop strings.
    pub fn step(
        &mut self,
        model: &Pretrained,
        tokenizer: Option<&Tokenizer>,
    ) -> Vec<(K, Generation)>
    where
        K: Send,
    {
        on_pool(|| self.step_here(model, tokenizer))
    }

    fn step_here(
        &mut self,
        model: &Pretrained,
        tokenizer: Option<&Tokenizer>,
    ) -> Vec<(K, Generation)> {
        let Some(logits) = self.logits.take() else {
            return Vec::new();
        };
        let device = logits.device();
        let vocab = logits.dims()[1];
        let live = self.live_slots();
        let samplers: Vec<&mut Sampler> = self
            .slots
            .iter_mut()
            .flatten()
            .map(|row| &mut row.sampler)
            .collect();
        let sampled = if reduces_on_device(&device, &samplers) {
            sample_on_device(samplers, logits, &live)
        } else {
            let data = logits.into_data();
            let all = data.as_slice::<f32>().expect("f32 logits");
            let rows = live
                .iter()
                .map(|&s| &all[s * vocab..(s + 1) * vocab])
                .collect();
            sample_rows(samplers, rows)
        };
        let mut next_ids = vec![0; self.slots.len()];
        let mut finished = Vec::new();
        for (&s, sampled) in live.iter().zip(sampled) {
            let row = self.slots[s].as_mut().expect("a live slot");
            let stop = match sampled {
                None => {
                    row.out.finish_reason = FinishReason::NonFinite;
                    true
                }
                Some((id, logprob)) => {
                    row.out.new_ids.push(id);
                    row.out.logprobs.push(logprob);
                    if row.stop_ids.contains(&id)
                        || hits_stop_string(&row.out.new_ids, &row.stop_strings, tokenizer)
                    {
                        row.out.finish_reason = FinishReason::Stop;
                        true
                    } else {
                        next_ids[s] = i64::from(id);
                        row.out.new_ids.len() >= row.budget
                    }
                }
            };
            if stop {
                let row = self.slots[s].take().expect("a live slot");
                if row.out.finish_reason == FinishReason::NonFinite {
                    self.cache.clear_row(s);
                }
                self.remember(s, &row);
                finished.push((row.key, row.out));
            }
        }
        let next_ids = self.compact_if_sparse(next_ids);
        if self.slots.is_empty() {
            return finished;
        }
        let slots = self.slots.len();
        // A free slot decodes a token at position 0, seeing only that position.
        let at: Vec<usize> = self
            .slots
            .iter()
            .map(|s| s.as_ref().map_or(0, |r| r.next_pos))
            .collect();
        self.cache.reserve(at.iter().max().map_or(1, |p| p + 1));
        // Each row sees its keys up to its own position.
        let windows = Some(at.iter().map(|&p| Window::after(p)).collect());
        let positions = at.iter().map(|&p| p as i64).collect();
        self.cache.write_at(at);
        let hidden = model.decoder.hidden(
            ForwardInput {
                ids: int_tensor(next_ids, [slots, 1], &device),
                positions: int_tensor(positions, [slots, 1], &device),
                windows,
            },
            &model.rope,
            Some(&mut self.cache),
        );
        for row in self.slots.iter_mut().flatten() {
            row.next_pos += 1;
        }
        self.logits = Some(model.decoder.logits(hidden).reshape([slots, vocab]));
        finished
    }

    /// Caches the keys and values of a finished sequence in slot `slot`: its context and
    /// output (all but the last id, which was never fed) start its chain's next context.
    fn remember(&mut self, slot: usize, row: &Row<K>) {
        let Some(prefix) = &mut self.prefix else {
            return;
        };
        if row.out.finish_reason == FinishReason::NonFinite {
            return;
        }
        let mut tokens = row.prompt.clone();
        tokens.extend_from_slice(&row.out.new_ids[..row.out.new_ids.len() - 1]);
        debug_assert_eq!(tokens.len(), row.next_pos);
        prefix.insert(tokens, self.cache.row(slot, 0, row.next_pos));
    }
}

/// A sequence whose context starts with a cached prefix: the prefix's keys and values, and
/// its length.
type Hit<K> = (Row<K>, (KvCache, usize));

/// The contexts found in the prefix cache, in groups prefilled together: sorted by the
/// tokens left to prefill, a group ends where padding its rows to the next one's length
/// would pad more than a third of its tokens (prefilling them one by one left one of the
/// two cores idle on products of ~100 rows).
fn padding_groups<R>(mut hits: Vec<Hit<R>>) -> Vec<Vec<Hit<R>>> {
    let left = |(row, (_, known)): &Hit<R>| row.prompt.len() - known;
    hits.sort_by_key(left);
    let mut groups: Vec<Vec<_>> = Vec::new();
    let mut tokens = 0;
    for hit in hits {
        let n = left(&hit);
        match groups.last_mut() {
            Some(group) if 3 * (group.len() + 1) * n <= 4 * (tokens + n) => {
                tokens += n;
                group.push(hit);
            }
            _ => {
                tokens = n;
                groups.push(vec![hit]);
            }
        }
    }
    groups
}
