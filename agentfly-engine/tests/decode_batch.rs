//! The continuous batch on the tiny Qwen2 fixture, step by step: a sequence that leaves
//! frees its slot of the cache, a later one (longer than every running context) joins into
//! that slot without moving the others, a batch with many free slots is compacted, and a
//! chain's next turn continues from the prefix cache — and every sequence generates
//! exactly what it generates alone.

use agentfly_testdata::support as common;

use agentfly_engine::generate::{
    DecodeBatch, Generation, Sampler, SamplingParams, SequenceSpec, generate,
};
use agentfly_model::Pretrained;
use std::collections::BTreeMap;

const STOP: u32 = 7;

fn params(budget: usize, seed: u64) -> SamplingParams {
    SamplingParams {
        max_new_tokens: budget,
        temperature: if seed.is_multiple_of(2) { 0.0 } else { 0.9 },
        seed,
        stop_ids: vec![STOP],
        ..SamplingParams::default()
    }
}

fn context(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|t| 11 + (t * 13 + salt * 5) % 480)
        .collect()
}

fn spec(prompt: Vec<u32>, budget: usize, seed: u64) -> SequenceSpec {
    SequenceSpec {
        prompt,
        sampler: Sampler::new(&params(budget, seed), 0),
        max_new_tokens: budget,
        stop_ids: vec![STOP],
        stop_strings: Vec::new(),
    }
}

fn alone(model: &Pretrained, prompt: &[u32], budget: usize, seed: u64) -> Generation {
    let out = generate(model, &[prompt.to_vec()], &params(budget, seed), None).unwrap();
    out.into_iter().next().unwrap()
}

#[test]
fn sequences_join_into_freed_slots_and_the_batch_compacts_without_changing_any_output() {
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap();
    // (key, prompt, budget, seed); 8 first, then joiners.
    let first: Vec<(usize, Vec<u32>, usize, u64)> = (0..8)
        .map(|i| {
            // Key 0 is long enough for the prefix cache and leaves first.
            let (len, budget) = if i == 0 { (24, 2) } else { (5 + 3 * i, 40 + i) };
            (i, context(len, i as u32), budget, 100 + i as u64)
        })
        .collect();
    let mut batch = DecodeBatch::with_prefix_cache(4096);
    let mut done: BTreeMap<usize, Generation> = BTreeMap::new();
    let mut want: BTreeMap<usize, Generation> = BTreeMap::new();
    let mut prompts: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for (key, prompt, budget, seed) in &first {
        want.insert(*key, alone(&model, prompt, *budget, *seed));
        prompts.insert(*key, prompt.clone());
    }
    let specs = first
        .iter()
        .map(|(k, p, b, s)| (*k, spec(p.clone(), *b, *s)))
        .collect();
    assert!(batch.admit(&model, specs).is_empty());
    assert_eq!((batch.len(), batch.slots()), (8, 8));
    // Key 0 (budget 2, or a stop) leaves within two steps; its slot stays, free.
    while !done.contains_key(&0) {
        done.extend(batch.step(&model, None));
    }
    let running = batch.len();
    assert_eq!(batch.slots(), 8, "one free slot of eight is kept");
    assert!(running < 8);

    // A sequence longer than every running context joins into the free slot.
    let long = context(60, 99);
    assert!(long.len() > batch.positions());
    want.insert(8, alone(&model, &long, 12, 108));
    prompts.insert(8, long.clone());
    assert!(
        batch
            .admit(&model, vec![(8, spec(long, 12, 108))])
            .is_empty()
    );
    assert_eq!(
        (batch.len(), batch.slots()),
        (running + 1, 8),
        "the joiner took a free slot"
    );

    // Key 0's next turn: its context, its output and an observation; the prefix cache
    // holds the first part.
    let mut next = prompts[&0].clone();
    let out0 = &done[&0].new_ids;
    next.extend_from_slice(&out0[..out0.len() - 1]);
    next.extend(context(6, 42));
    want.insert(9, alone(&model, &next, 9, 109));
    assert!(
        batch
            .admit(&model, vec![(9, spec(next, 9, 109))])
            .is_empty()
    );
    assert!(
        batch.prefix_stats().0 >= 1,
        "the next turn found its prefix"
    );

    let mut smallest = batch.slots();
    while !batch.is_empty() {
        done.extend(batch.step(&model, None));
        smallest = smallest.min(batch.slots());
        assert!(batch.is_empty() || 4 * (batch.slots() - batch.len()) <= batch.slots());
    }
    assert!(smallest < 8, "the batch was compacted as sequences left");
    assert_eq!(done.len(), want.len());
    for (key, got) in &done {
        let want = &want[key];
        assert_eq!(got.new_ids, want.new_ids, "sequence {key}");
        assert_eq!(got.finish_reason, want.finish_reason, "sequence {key}");
        for (a, b) in got.logprobs.iter().zip(&want.logprobs) {
            assert!((a - b).abs() < 1e-4, "sequence {key}: logprob {a} vs {b}");
        }
    }
}

#[test]
fn next_turns_of_many_chains_are_prefilled_together_and_generate_what_they_generate_alone() {
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap();
    let mut batch = DecodeBatch::with_prefix_cache(8192);
    // Six chains' first turns, contexts of different lengths (16 tokens at least: the
    // prefix cache keeps nothing shorter).
    let first: Vec<(usize, SequenceSpec)> = (0..6)
        .map(|i| {
            (
                i,
                spec(context(16 + 7 * i, i as u32), 3 + i, 200 + i as u64),
            )
        })
        .collect();
    let prompts: Vec<Vec<u32>> = first.iter().map(|(_, s)| s.prompt.clone()).collect();
    let mut done: BTreeMap<usize, Generation> = BTreeMap::new();
    done.extend(batch.admit(&model, first));
    while !batch.is_empty() {
        done.extend(batch.step(&model, None));
    }
    // Their next turns: each context, its output and an observation of its own length
    // (1 to 26 tokens: some groups padded, some not), admitted at once.
    let hits_before = batch.prefix_stats().0;
    let mut want = BTreeMap::new();
    let mut next = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let mut turn = prompt.clone();
        let out = &done[&i].new_ids;
        turn.extend_from_slice(&out[..out.len() - 1]);
        turn.extend(observation(i));
        want.insert(10 + i, alone(&model, &turn, 9, 300 + i as u64));
        next.push((10 + i, spec(turn, 9, 300 + i as u64)));
    }
    let mut got: BTreeMap<usize, Generation> = batch.admit(&model, next).into_iter().collect();
    assert_eq!(
        batch.prefix_stats().0 - hits_before,
        6,
        "every next turn found its prefix"
    );
    assert_eq!(batch.len(), 6);
    while !batch.is_empty() {
        got.extend(batch.step(&model, None));
    }
    for (key, want) in &want {
        let got = &got[key];
        assert_eq!(got.new_ids, want.new_ids, "sequence {key}");
        for (a, b) in got.logprobs.iter().zip(&want.logprobs) {
            assert!((a - b).abs() < 1e-4, "sequence {key}: logprob {a} vs {b}");
        }
    }
}

/// A compacted batch keeps its cache's room: sequences that join after it (more than the
/// free slots) take rows the compaction left, and a longer one grows the buffers; each still
/// generates what it generates alone.
#[test]
fn sequences_that_join_a_compacted_batch_generate_what_they_generate_alone() {
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap();
    let mut batch = DecodeBatch::new();
    let mut want: BTreeMap<usize, Generation> = BTreeMap::new();
    let mut done: BTreeMap<usize, Generation> = BTreeMap::new();
    let mut admit = |batch: &mut DecodeBatch<usize>, key: usize, len: usize, budget: usize| {
        let (prompt, seed) = (context(len, key as u32), 500 + key as u64);
        want.insert(key, alone(&model, &prompt, budget, seed));
        batch.admit(&model, vec![(key, spec(prompt, budget, seed))])
    };
    // Eight sequences, five of them short: they leave and the batch is compacted.
    for key in 0..8 {
        let budget = if key % 3 == 0 { 30 } else { 2 };
        assert!(admit(&mut batch, key, 6 + key, budget).is_empty());
    }
    while batch.slots() == 8 {
        done.extend(batch.step(&model, None));
    }
    let (live, slots) = (batch.len(), batch.slots());
    assert!(
        live <= 3 && slots < 8,
        "compacted to {slots} slots for {live}"
    );
    // Four joiners, more than the free slots; the last is longer than any context so far.
    for (key, len) in [(8, 9), (9, 12), (10, 7), (11, 90)] {
        assert!(admit(&mut batch, key, len, 10).is_empty());
    }
    assert_eq!(batch.len(), live + 4);
    while !batch.is_empty() {
        done.extend(batch.step(&model, None));
    }
    assert_eq!(done.len(), want.len());
    for (key, want) in &want {
        let got = &done[key];
        assert_eq!(got.new_ids, want.new_ids, "sequence {key}");
        for (a, b) in got.logprobs.iter().zip(&want.logprobs) {
            assert!((a - b).abs() < 1e-4, "sequence {key}: logprob {a} vs {b}");
        }
    }
}

/// Chain `i`'s observation: `[1, 2, 3, 26, 5, 26]` tokens long.
fn observation(i: usize) -> Vec<u32> {
    let len = [1, 2, 3, 26, 5, 26][i];
    context(len, 50 + i as u32)
}
