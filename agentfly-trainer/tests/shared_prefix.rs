//! Rows that begin with the same tokens run that prefix through the network once
//! (`Decoder::hidden_after_prefix`, which training and scoring use): on the tiny Qwen2
//! fixture, its hidden states, log-probs and gradients equal the plain pass over the rows
//! written out in full, and a policy update comes out the same with sharing on or off —
//! also where the rows have learned tokens in common (chains that sampled the same first
//! turn), which the prefix's own pass computes once for all of them.

use agentfly_testdata::support as common;

mod support;
use support::{assert_same_gradients, learning, max_diff, scored_and_updated, values};

use agentfly_model::Pretrained;
use agentfly_trainer::train::{
    Packed, PolicyRow, StepReport, logprobs_at, logprobs_of_hidden, share_prefixes,
};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};

const PREFIX: usize = 40;

/// Three rows over one 40-token prefix, of different lengths (the longest past one
/// attention block of 128 query rows after the prefix), and their learned positions, all
/// past the prefix: `(row, position)` predicting the token after it.
fn rows() -> (Vec<Vec<u32>>, Vec<(usize, usize)>) {
    let prefix: Vec<u32> = (0..PREFIX as u32).map(|t| 7 + (t * 37) % 500).collect();
    let rows: Vec<Vec<u32>> = [150usize, 23, 71]
        .iter()
        .enumerate()
        .map(|(r, &len)| {
            let mut row = prefix.clone();
            row.extend((0..len as u32).map(|t| 3 + (t * 101 + r as u32 * 211) % 505));
            row
        })
        .collect();
    let picks = rows
        .iter()
        .enumerate()
        .flat_map(|(r, row)| (PREFIX..row.len() - 1).step_by(3).map(move |t| (r, t)))
        .collect();
    (rows, picks)
}

#[test]
fn the_prefix_run_once_gives_the_hidden_states_logprobs_and_gradients_of_the_full_rows() {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let (rows, picks) = rows();
    let targets: Vec<u32> = picks.iter().map(|&(r, t)| rows[r][t + 1]).collect();
    let full: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
    let rest: Vec<&[u32]> = rows.iter().map(|r| &r[PREFIX..]).collect();
    let decoder = &model.decoder;

    // Hidden states: every real position past the prefix (padding differs and is unread).
    let packed = Packed::new(&full, &device);
    let plain = decoder.causal_hidden(packed.ids.clone(), &model.rope);
    let shared = decoder.hidden_after_prefix(
        Packed::new(&[&rows[0][..PREFIX]], &device).ids,
        Packed::new(&rest, &device).ids,
        &model.rope,
    );
    for (r, row) in rows.iter().enumerate() {
        let n = row.len() - PREFIX;
        let want = values(plain.clone().narrow(0, r, 1).narrow(1, PREFIX, n));
        let got = values(shared.clone().narrow(0, r, 1).narrow(1, 0, n));
        let diff = max_diff(&want, &got);
        assert!(diff < 1e-4, "row {r}: hidden states differ by {diff}");
    }

    // Log-probs and the gradients of a loss over them.
    let want = logprobs_at(
        decoder,
        &model.rope,
        packed.ids,
        &picks,
        &targets,
        true,
        0.7,
    );
    let moved: Vec<(usize, usize)> = picks.iter().map(|&(r, t)| (r, t - PREFIX)).collect();
    let got = logprobs_of_hidden(decoder, shared, &moved, &targets, true, 0.7);
    let diff = max_diff(
        &values(want.logprobs.clone()),
        &values(got.logprobs.clone()),
    );
    assert!(diff < 1e-4, "log-probs differ by {diff}");
    let entropy = |a: &agentfly_trainer::train::AtPositions| values(a.entropy.clone().unwrap());
    let diff = max_diff(&entropy(&want), &entropy(&got));
    assert!(diff < 1e-4, "entropies differ by {diff}");
    let weights: Vec<f32> = (0..picks.len()).map(|i| (i % 5) as f32 - 2.0).collect();
    let loss = |lp: Tensor<1>| {
        let n = weights.len();
        (lp * Tensor::<1>::from_data(TensorData::new(weights.clone(), [n]), &device)).sum()
    };
    let want = GradientsParams::from_grads(loss(want.logprobs).backward(), decoder);
    let got = GradientsParams::from_grads(loss(got.logprobs).backward(), decoder);
    assert_same_gradients(decoder, &want, &got);
}

#[test]
fn a_policy_update_is_the_same_with_prefixes_shared_or_not() {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let (tokens, picks) = rows();
    let rows: Vec<PolicyRow> = tokens
        .into_iter()
        .enumerate()
        .map(|(r, tokens)| {
            let mut mask = vec![0.0; tokens.len()];
            for &(_, t) in picks.iter().filter(|(pr, _)| *pr == r) {
                mask[t + 1] = 1.0;
            }
            learning(tokens, mask, if r == 1 { -1.0 } else { 1.0 })
        })
        .collect();
    // AdamW's first step moves each weight by about ±lr whatever its gradient's size, so
    // the weights cannot tell rounding apart from a wrong gradient: the gradients are
    // compared entry by entry above; here the update's loss, entropy and (unclipped)
    // gradient norm.
    let (_, plain) = scored_and_updated(&model, &rows, share_prefixes, false);
    let (_, shared) = scored_and_updated(&model, &rows, share_prefixes, true);
    assert_same_update(&plain, &shared);
}

/// Chains of one prompt that sampled the same first turn (learned), read the same
/// observation, then went apart in what they learn from (one right after the common
/// part), with advantages of both signs.
fn chains_with_a_common_turn() -> Vec<PolicyRow> {
    let tokens = |n: u32, seed: u32| (0..n).map(move |t| 3 + (t * 101 + seed * 211) % 505);
    let turn: Vec<u32> = tokens(30, 1)
        .chain(tokens(25, 2))
        .chain(tokens(20, 3))
        .collect();
    [(60, 4, 1.0), (1, 5, -1.0), (33, 6, 0.5), (33, 7, -0.5)]
        .into_iter()
        .map(|(tail, seed, advantage)| {
            let tokens: Vec<u32> = turn.iter().copied().chain(tokens(tail, seed)).collect();
            // The prompt (30) and the observation (20) are not learned; the turn and the
            // tail are.
            let mask: Vec<f32> = (0..tokens.len())
                .map(|t| f32::from(u8::from(!(t < 30 || (55..75).contains(&t)))))
                .collect();
            learning(tokens, mask, advantage)
        })
        .collect()
}

/// `rows`' log-probs and update with prefixes shared are those without (the tiny model):
/// the shared log-probs.
fn same_with_sharing(rows: &[PolicyRow]) -> Vec<Vec<f32>> {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let (plain_lp, plain) = scored_and_updated(&model, rows, share_prefixes, false);
    let (shared_lp, shared) = scored_and_updated(&model, rows, share_prefixes, true);
    for (r, (a, b)) in plain_lp.iter().zip(&shared_lp).enumerate() {
        let diff = max_diff(a, b);
        assert!(diff < 1e-4, "row {r}: log-probs differ by {diff}");
    }
    assert_same_update(&plain, &shared);
    shared_lp
}

#[test]
fn learned_tokens_the_rows_share_are_computed_once_with_the_same_logprobs_and_update() {
    let shared = same_with_sharing(&chains_with_a_common_turn());
    for (r, lp) in shared.iter().enumerate() {
        // Within the common turn every row's log-probs are the same computation.
        assert_eq!(lp[30..54], shared[0][30..54], "row {r}");
    }
    assert!(shared[1][30..54].iter().all(|&x| x < 0.0));
}

/// One micro-batch, one applied update each, with a gradient, and the same loss, gradient
/// norm and entropy.
fn assert_same_update(plain: &StepReport, shared: &StepReport) {
    assert_eq!(plain.micro_batches, 1, "{plain:?}");
    assert_eq!((plain.updates, shared.updates), (1, 1));
    assert!(plain.grad_norm > 0.0, "{plain:?}");
    assert!(
        (plain.loss - shared.loss).abs() < 1e-5,
        "{plain:?}\n{shared:?}"
    );
    assert!(
        (plain.grad_norm - shared.grad_norm).abs() < 1e-4 * plain.grad_norm,
        "{plain:?}\n{shared:?}"
    );
    assert!((plain.entropy - shared.entropy).abs() < 1e-4);
}

/// Chains that sampled the same tokens but their last: past the shared prefix every row is
/// one token long, a decode step's shape, which the training pass (under autodiff) must
/// still run through the differentiable operations (it panicked in the decode step's
/// rotation, on the wiki-qa job's fifth RL step).
#[test]
fn rows_that_part_only_at_their_last_token_train_as_without_sharing() {
    let rows: Vec<PolicyRow> = [(7, 1.0), (8, -1.0), (8, -1.0)]
        .into_iter()
        .map(|(last, advantage)| {
            let tokens: Vec<u32> = (0..40u32)
                .map(|t| 3 + (t * 37) % 400)
                .chain([last])
                .collect();
            let mask = (0..tokens.len())
                .map(|t| f32::from(u8::from(t >= 20)))
                .collect();
            learning(tokens, mask, advantage)
        })
        .collect();
    let shared = same_with_sharing(&rows);
    assert_ne!(shared[0][39], shared[1][39]);
}
