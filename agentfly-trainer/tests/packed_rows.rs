//! Rows of different lengths laid end to end in one sequence (`Decoder::hidden_of_spans`,
//! `Decoder::hidden_after_prefix_of_spans`), each attending to itself alone, instead of
//! padded to the longest: on the tiny Qwen2 fixture, their hidden states, log-probs,
//! entropies and gradients equal the padded pass's, and a policy update — scoring, the
//! loss, the gradient norm — comes out the same with packing on or off, with no padding
//! computed when on.

use agentfly_testdata::support as common;

mod support;
use support::{assert_same_gradients, learning, max_diff, scored_and_updated, values};

use agentfly_model::Pretrained;
use agentfly_trainer::train::{AtPositions, Packed, PolicyRow, logprobs_of_hidden, pack_rows};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

/// `n` made-up token ids, varied by `seed`.
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|t| 3 + (t * 101 + seed * 211) % 505)
        .collect()
}

/// Where each of `lens` begins when they are laid end to end.
fn starts(lens: &[usize]) -> Vec<usize> {
    lens.iter()
        .scan(0, |at, &n| {
            *at += n;
            Some(*at - n)
        })
        .collect()
}

/// The packed pass's log-probs, entropies and gradients (embedding, first layer's q/k/v,
/// last layer's MLP) equal the padded pass's at the same picks.
fn assert_same(decoder_of: &Pretrained, padded: AtPositions, packed: AtPositions, device: &Device) {
    let decoder = &decoder_of.decoder;
    let diff = max_diff(
        &values(padded.logprobs.clone()),
        &values(packed.logprobs.clone()),
    );
    assert!(diff < 1e-4, "log-probs differ by {diff}");
    let entropy = |a: &AtPositions| values(a.entropy.clone().unwrap());
    let diff = max_diff(&entropy(&padded), &entropy(&packed));
    assert!(diff < 1e-4, "entropies differ by {diff}");
    let n = values(padded.logprobs.clone()).len();
    let weights: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
    let loss = |lp: Tensor<1>| {
        (lp * Tensor::<1>::from_data(TensorData::new(weights.clone(), [n]), device)).sum()
    };
    let want = GradientsParams::from_grads(loss(padded.logprobs).backward(), decoder);
    let got = GradientsParams::from_grads(loss(packed.logprobs).backward(), decoder);
    assert_same_gradients(decoder, &want, &got);
}

#[test]
fn packed_rows_give_the_padded_passes_hidden_states_logprobs_and_gradients() {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let decoder = &model.decoder;
    // Past one attention block (64 query rows) and shorter than one, down to two tokens.
    let rows: Vec<Vec<u32>> = [150usize, 23, 2, 71]
        .iter()
        .enumerate()
        .map(|(r, &n)| tokens(n, r as u32))
        .collect();
    let lens: Vec<usize> = rows.iter().map(Vec::len).collect();
    let at = starts(&lens);
    let picks: Vec<(usize, usize)> = rows
        .iter()
        .enumerate()
        .flat_map(|(r, row)| (0..row.len() - 1).step_by(2).map(move |t| (r, t)))
        .collect();
    let targets: Vec<u32> = picks.iter().map(|&(r, t)| rows[r][t + 1]).collect();
    let moved: Vec<(usize, usize)> = picks.iter().map(|&(r, t)| (0, at[r] + t)).collect();
    let refs: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
    let flat = rows.concat();

    let padded = decoder.causal_hidden(Packed::new(&refs, &device).ids, &model.rope);
    let packed = decoder.hidden_of_spans(
        Packed::new(&[flat.as_slice()], &device).ids,
        &lens,
        &model.rope,
    );
    assert_eq!(packed.dims()[..2], [1, flat.len()]);
    for (r, &n) in lens.iter().enumerate() {
        let want = values(padded.clone().narrow(0, r, 1).narrow(1, 0, n));
        let got = values(packed.clone().narrow(1, at[r], n));
        let diff = max_diff(&want, &got);
        assert!(diff < 1e-4, "row {r}: hidden states differ by {diff}");
    }
    let temperature = 0.7;
    let want = logprobs_of_hidden(decoder, padded, &picks, &targets, true, temperature);
    let got = logprobs_of_hidden(decoder, packed, &moved, &targets, true, temperature);
    assert_same(&model, want, got, &device);
}

#[test]
fn packed_rows_after_a_shared_prefix_give_the_padded_passes_results() {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let decoder = &model.decoder;
    let prefix = tokens(40, 9);
    let tails: Vec<Vec<u32>> = [90usize, 1, 33]
        .iter()
        .enumerate()
        .map(|(r, &n)| tokens(n, 20 + r as u32))
        .collect();
    let lens: Vec<usize> = tails.iter().map(Vec::len).collect();
    let at = starts(&lens);
    // Picks in the prefix (every row reads them from the prefix's own pass) and past it.
    let picks: Vec<(usize, usize)> = (0..tails.len())
        .flat_map(|r| (30..40 + lens[r] - 1).step_by(3).map(move |t| (r, t)))
        .collect();
    let full: Vec<Vec<u32>> = tails.iter().map(|t| [&prefix[..], t].concat()).collect();
    let targets: Vec<u32> = picks.iter().map(|&(r, t)| full[r][t + 1]).collect();
    let refs: Vec<&[u32]> = tails.iter().map(Vec::as_slice).collect();
    let flat = tails.concat();
    let prefix_ids = || Packed::new(&[prefix.as_slice()], &device).ids;

    let (want_prefix, want_rows) = decoder.hidden_of_prefix_and_rows(
        prefix_ids(),
        Packed::new(&refs, &device).ids,
        &model.rope,
    );
    let (got_prefix, got_rows) = decoder.hidden_of_prefix_and_spans(
        prefix_ids(),
        Packed::new(&[flat.as_slice()], &device).ids,
        &lens,
        &model.rope,
    );
    let diff = max_diff(&values(want_prefix.clone()), &values(got_prefix.clone()));
    assert!(diff < 1e-5, "the prefix's hidden states differ by {diff}");
    for (r, &n) in lens.iter().enumerate() {
        let want = values(want_rows.clone().narrow(0, r, 1).narrow(1, 0, n));
        let got = values(got_rows.clone().narrow(1, at[r], n));
        let diff = max_diff(&want, &got);
        assert!(diff < 1e-4, "row {r}: hidden states differ by {diff}");
    }
    let after = decoder.hidden_after_prefix_of_spans(
        prefix_ids(),
        Packed::new(&[flat.as_slice()], &device).ids,
        &lens,
        &model.rope,
    );
    let diff = max_diff(&values(after), &values(got_rows.clone()));
    assert!(
        diff < 1e-5,
        "hidden_after_prefix_of_spans differs by {diff}"
    );

    // The learned positions: each row's hidden state at `t` is the prefix's below 40 and
    // its own past it, in each layout.
    let width = want_rows.dims()[2];
    let select = |prefix: Tensor<3>, rows: Tensor<3>, place: &dyn Fn(usize, usize) -> usize| {
        let rows_flat = rows
            .clone()
            .reshape([rows.dims()[0] * rows.dims()[1], width]);
        let prefix_flat = prefix.reshape([40, width]);
        let chosen: Vec<Tensor<2>> = picks
            .iter()
            .map(|&(r, t)| {
                if t < 40 {
                    prefix_flat.clone().narrow(0, t, 1)
                } else {
                    rows_flat.clone().narrow(0, place(r, t - 40), 1)
                }
            })
            .collect();
        let n = chosen.len();
        Tensor::cat(chosen, 0).reshape([1, n, width])
    };
    let longest = *lens.iter().max().unwrap();
    let want = select(want_prefix, want_rows, &|r, t| r * longest + t);
    let got = select(got_prefix, got_rows, &|r, t| at[r] + t);
    let all: Vec<(usize, usize)> = (0..picks.len()).map(|i| (0, i)).collect();
    let want = logprobs_of_hidden(decoder, want, &all, &targets, true, 1.0);
    let got = logprobs_of_hidden(decoder, got, &all, &targets, true, 1.0);
    assert_same(&model, want, got, &device);
}

/// A policy update on rows of one prompt (the prefix shared, learned tokens in common) and
/// on rows of different prompts: the same log-probs, loss, gradient norm and entropy
/// packed or padded; the padded pass computes padding, the packed one none. (The only test
/// in this file that turns packing off, so that no other sees it off.)
#[test]
fn a_policy_update_is_the_same_packed_or_padded() {
    let device = common::device().autodiff();
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &device).unwrap();
    let turn: Vec<u32> = [tokens(30, 1), tokens(25, 2), tokens(20, 3)].concat();
    let one_prompt: Vec<PolicyRow> = [(60, 4, 1.0), (1, 5, -1.0), (33, 6, 0.5), (90, 7, -0.5)]
        .into_iter()
        .map(|(tail, seed, advantage)| {
            let tokens: Vec<u32> = [turn.clone(), tokens(tail, seed)].concat();
            // The prompt (30) and the observation (20) are not learned; the turn and the
            // tail are.
            let mask: Vec<f32> = (0..tokens.len())
                .map(|t| f32::from(u8::from(!(t < 30 || (55..75).contains(&t)))))
                .collect();
            learning(tokens, mask, advantage)
        })
        .collect();
    let many_prompts: Vec<PolicyRow> = [(140, 1.0), (12, -1.0), (75, 0.5), (3, -0.5)]
        .into_iter()
        .enumerate()
        .map(|(r, (n, advantage))| {
            let tokens = tokens(n, 40 + r as u32);
            let mask = (0..n).map(|t| f32::from(u8::from(t >= n / 3))).collect();
            learning(tokens, mask, advantage)
        })
        .collect();
    for (what, rows) in [("one prompt", one_prompt), ("many prompts", many_prompts)] {
        let (padded_lp, padded) = scored_and_updated(&model, &rows, pack_rows, false);
        let (packed_lp, packed) = scored_and_updated(&model, &rows, pack_rows, true);
        for (r, (a, b)) in padded_lp.iter().zip(&packed_lp).enumerate() {
            let diff = max_diff(a, b);
            assert!(diff < 1e-4, "{what}, row {r}: log-probs differ by {diff}");
        }
        assert_eq!((padded.micro_batches, packed.micro_batches), (1, 1));
        assert_eq!((padded.updates, packed.updates), (1, 1));
        assert!(padded.grad_norm > 0.0, "{padded:?}");
        assert!(
            (padded.loss - packed.loss).abs() < 1e-5
                && (padded.grad_norm - packed.grad_norm).abs() < 1e-4 * padded.grad_norm
                && (padded.entropy - packed.entropy).abs() < 1e-4,
            "{what}:\n{padded:?}\n{packed:?}"
        );
        assert!(padded.padded_tokens > 0, "{what}: {padded:?}");
        assert_eq!(packed.padded_tokens, 0, "{what}");
        assert!(packed.computed_tokens < padded.computed_tokens, "{what}");
        assert_eq!(
            packed.computed_tokens + packed.padded_tokens,
            packed.row_tokens - shared_minus_once(&rows),
            "{what}: the packed pass computes each row's tokens once, a shared prefix once"
        );
    }
}

/// The tokens a shared prefix saves: (rows − 1) × the prefix the rows all begin with (as
/// the trainer finds it: at least 16 tokens, leaving each row one token past it).
fn shared_minus_once(rows: &[PolicyRow]) -> usize {
    let first = &rows[0].tokens;
    let shared = rows
        .iter()
        .map(|r| {
            let common = first.iter().zip(&r.tokens).take_while(|(a, b)| a == b);
            common.count().min(r.tokens.len() - 1)
        })
        .min()
        .unwrap();
    if shared >= 16 {
        (rows.len() - 1) * shared
    } else {
        0
    }
}
