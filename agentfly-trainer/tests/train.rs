//! The training pieces on the tiny Qwen2 fixture, on Burn's autodiff: masked tokens get
//! exactly zero gradient, autodiff gradients match finite differences, micro-batches add
//! up to the batch, and AdamW steps lower the SFT loss.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use agentfly_model::model::Decoder;
use agentfly_trainer::train::{
    KlEstimator, LossAggregation, OptimConfig, Packed, PolicyLossConfig, PolicyLossInput,
    aggregation_weights, clip_grad_norm, grad_norm, logprobs_from_logits, policy_loss, sft_loss,
    token_logprobs,
};
use burn::module::{Module, Param};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};

fn load(device: &Device) -> Pretrained {
    Pretrained::load(common::fixtures().join("tiny-qwen2"), device).unwrap()
}

fn autodiff() -> Device {
    common::device().autodiff()
}

fn t2(values: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// `param` with its `i`-th entry (row-major) moved by `delta`.
fn bumped<const D: usize>(param: &Param<Tensor<D>>, i: usize, delta: f32) -> Param<Tensor<D>> {
    let t = param.val();
    let (shape, device) = (t.shape(), t.device());
    let mut w = values(t);
    w[i] += delta;
    Param::from_tensor(Tensor::from_data(TensorData::new(w, shape), &device))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn host(t: Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// Two sequences (the second shorter, right-padded) and a mask over their targets.
fn batch() -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let seqs = vec![
        vec![5, 17, 200, 31, 9, 44, 101, 7, 12],
        vec![3, 88, 120, 64, 2, 19],
    ];
    // Targets are ids 1..len: mask 1 on "sampled" ones, 0 on prompt/observations/padding.
    let masks = vec![
        vec![0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0],
        vec![0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
    ];
    (seqs, masks)
}

fn advantages() -> Vec<f32> {
    (0..16).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect()
}

#[test]
fn masked_positions_get_exactly_zero_gradient() {
    let device = autodiff();
    let model = load(&device);
    let (seqs, masks) = batch();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let len = packed.len();
    // The logits as a leaf, so their gradient can be read.
    let logits = model
        .decoder
        .forward(packed.ids.clone(), &model.rope)
        .narrow(1, 0, len - 1)
        .detach()
        .require_grad();
    let (logprobs, entropy) = logprobs_from_logits(
        logits.clone(),
        packed.ids.clone().narrow(1, 1, len - 1),
        true,
    );
    let old = logprobs.clone().detach() + 0.05; // ratios away from 1
    let weights = aggregation_weights(&masks, LossAggregation::TokenMean);
    let loss = policy_loss(
        PolicyLossInput {
            logprobs: logprobs.clone(),
            old_logprobs: old,
            ref_logprobs: Some(logprobs.clone().detach() - 0.1),
            advantages: t2(advantages(), [2, len - 1], &device),
            weights: t2(weights.concat(), [2, len - 1], &device),
            entropy,
        },
        &PolicyLossConfig {
            kl_coef: 0.1,
            entropy_coef: 0.01,
            ..PolicyLossConfig::default()
        },
    );
    let grads = loss.loss.backward();
    let g = logits.grad(&grads).unwrap();
    let vocab = g.dims()[2];
    let g: Vec<f32> = g.into_data().try_to_vec::<f32>().unwrap();
    for (row, mask) in masks.iter().enumerate() {
        for (t, &m) in mask.iter().enumerate() {
            let start = (row * (len - 1) + t) * vocab;
            let cells = &g[start..start + vocab];
            if m == 0.0 {
                assert!(
                    cells.iter().all(|&x| x == 0.0),
                    "row {row} position {t} is masked"
                );
            } else {
                assert!(
                    cells.iter().any(|&x| x != 0.0),
                    "row {row} position {t} learns"
                );
            }
        }
    }
}

/// The policy loss of the batch under `decoder`, with fixed old / reference log-probs.
fn loss_of(
    decoder: &Decoder,
    model: &Pretrained,
    device: &Device,
    fixed: &[Vec<f32>; 2],
) -> Tensor<1> {
    let (seqs, masks) = batch();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, device);
    let len = packed.len();
    let (logprobs, entropy) = token_logprobs(decoder, &model.rope, packed.ids, true);
    let weights = aggregation_weights(&masks, LossAggregation::SeqMeanTokenMean);
    policy_loss(
        PolicyLossInput {
            logprobs,
            old_logprobs: t2(fixed[0].clone(), [2, len - 1], device),
            ref_logprobs: Some(t2(fixed[1].clone(), [2, len - 1], device)),
            advantages: t2(advantages(), [2, len - 1], device),
            weights: t2(weights.concat(), [2, len - 1], device),
            entropy,
        },
        &PolicyLossConfig {
            kl_coef: 0.2,
            kl_estimator: KlEstimator::K3,
            entropy_coef: 0.05,
            ..PolicyLossConfig::default()
        },
    )
    .loss
}

#[test]
fn gradients_match_finite_differences() {
    let device = autodiff();
    let model = load(&device);
    let (seqs, _) = batch();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let plain = model.decoder.valid();
    let (lp, _) = token_logprobs(&plain, &model.rope, packed.ids.clone().inner(), false);
    let lp = host(lp);
    let fixed = [
        lp.iter().map(|x| x + 0.03).collect::<Vec<_>>(),
        lp.iter().map(|x| x - 0.2).collect::<Vec<_>>(),
    ];
    let loss = loss_of(&model.decoder, &model, &device, &fixed);
    let grads = GradientsParams::from_grads(loss.backward(), &model.decoder);
    let norm_grad = values(grads.get::<1>(model.decoder.norm.weight.id).unwrap());
    let down = &model.decoder.blocks[0].mlp.down.weight;
    let down_grad = values(grads.get::<2>(down.id).unwrap());

    let plain_device = common::device();
    let eval = |decoder: &Decoder| -> f64 {
        f64::from(loss_of(decoder, &model, &plain_device, &fixed).into_scalar::<f32>())
    };
    let h = 1e-2f32;
    let mut checked = 0;
    let mut compare = |name: &str, ad: f32, plus: Decoder, minus: Decoder| {
        let fd = (eval(&plus) - eval(&minus)) / (2.0 * f64::from(h));
        let ad = f64::from(ad);
        assert!(
            (fd - ad).abs() < 2e-3 + 0.03 * ad.abs(),
            "{name}: autodiff {ad} vs finite difference {fd}"
        );
        checked += usize::from(ad.abs() > 1e-4);
    };
    // Entries of the final norm (1-D) and of an MLP projection (2-D).
    for i in [0usize, 7, 31] {
        let bump = |delta: f32| {
            let mut d = plain.clone();
            d.norm.weight = bumped(&d.norm.weight, i, delta);
            d
        };
        compare(&format!("norm[{i}]"), norm_grad[i], bump(h), bump(-h));
    }
    let [rows, cols] = down.val().dims();
    for i in [3usize, rows * cols / 2 + 5, rows * cols - 2] {
        let bump = |delta: f32| {
            let mut d = plain.clone();
            let w = &d.blocks[0].mlp.down.weight;
            d.blocks[0].mlp.down.weight = bumped(w, i, delta);
            d
        };
        compare(&format!("down[{i}]"), down_grad[i], bump(h), bump(-h));
    }
    assert!(checked >= 4, "most checked gradients are not negligible");
}

#[test]
fn micro_batches_add_up_to_the_batch() {
    let device = autodiff();
    let model = load(&device);
    let (seqs, masks) = batch();
    let weights = aggregation_weights(&masks, LossAggregation::TokenMean);
    let sft = |rows: &[usize]| {
        let refs: Vec<&[u32]> = rows.iter().map(|&r| seqs[r].as_slice()).collect();
        let packed = Packed::new(&refs, &device);
        let len = packed.len();
        let (lp, _) = token_logprobs(&model.decoder, &model.rope, packed.ids, false);
        let w: Vec<f32> = rows
            .iter()
            .flat_map(|&r| {
                let mut w = weights[r][..len - 1].to_vec();
                w.resize(len - 1, 0.0);
                w
            })
            .collect();
        sft_loss(lp, t2(w, [rows.len(), len - 1], &device))
    };
    let whole = GradientsParams::from_grads(sft(&[0, 1]).backward(), &model.decoder);
    let mut acc = GradientsAccumulator::new();
    acc.accumulate(
        &model.decoder,
        GradientsParams::from_grads(sft(&[0]).backward(), &model.decoder),
    );
    acc.accumulate(
        &model.decoder,
        GradientsParams::from_grads(sft(&[1]).backward(), &model.decoder),
    );
    let parts = acc.grads();
    let a = grad_norm(&model.decoder, &whole);
    let b = grad_norm(&model.decoder, &parts);
    assert!(a > 0.0 && (a - b).abs() < 1e-4 * a, "{a} vs {b}");
    let id = model.decoder.embed.id;
    let ga: Vec<f32> = whole
        .get::<2>(id)
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let gb: Vec<f32> = parts
        .get::<2>(id)
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let diff = ga
        .iter()
        .zip(&gb)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-6, "max |Δgrad| = {diff}");
}

#[test]
fn adamw_steps_lower_the_sft_loss_and_clipping_bounds_the_norm() {
    let device = autodiff();
    let model = load(&device);
    let (seqs, masks) = batch();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let len = packed.len();
    let weights = aggregation_weights(&masks, LossAggregation::TokenMean).concat();
    let config = OptimConfig {
        lr: 1e-2,
        max_grad_norm: 0.5,
        ..OptimConfig::default()
    };
    let mut optim = config.init();
    let mut decoder = model.decoder.clone();
    let mut losses = Vec::new();
    for step in 0..6 {
        let (lp, _) = token_logprobs(&decoder, &model.rope, packed.ids.clone(), false);
        let loss = sft_loss(lp, t2(weights.clone(), [2, len - 1], &device));
        losses.push(loss.clone().into_scalar::<f32>());
        let mut grads = GradientsParams::from_grads(loss.backward(), &decoder);
        let before = clip_grad_norm(&decoder, &mut grads, config.max_grad_norm);
        assert!(before.is_finite() && before > 0.0);
        let after = grad_norm(&decoder, &grads);
        assert!(after <= config.max_grad_norm * 1.0001, "clipped to {after}");
        decoder = optim.step(config.lr_at(step, 6), decoder, grads);
    }
    assert!(losses[5] < losses[0] * 0.8, "SFT loss fell: {losses:?}");

    // A NaN gradient is reported as a non-finite norm, and nothing is scaled.
    let (lp, _) = token_logprobs(&decoder, &model.rope, packed.ids.clone(), false);
    let nan = sft_loss(lp, t2(vec![f32::NAN; 2 * (len - 1)], [2, len - 1], &device));
    let mut grads = GradientsParams::from_grads(nan.backward(), &decoder);
    assert!(!clip_grad_norm(&decoder, &mut grads, 1.0).is_finite());
    let _: Tensor<2, Int> = packed.ids;
}

fn rows(advantage: f32) -> Vec<agentfly_trainer::train::PolicyRow> {
    let (seqs, masks) = batch();
    seqs.into_iter()
        .zip(masks)
        .enumerate()
        .map(|(r, (tokens, target_mask))| {
            // The masks above are over targets (tokens 1..): put them back on tokens.
            let mut mask = vec![0.0];
            mask.extend(&target_mask[..tokens.len() - 1]);
            let sign = if r == 0 { 1.0 } else { -1.0 };
            let advantages = mask.iter().map(|m| m * advantage * sign).collect();
            agentfly_trainer::train::PolicyRow {
                tokens,
                mask,
                advantages,
                ..Default::default()
            }
        })
        .collect()
}

fn mean_logprob(
    model: &Pretrained,
    decoder: &Decoder,
    row: &agentfly_trainer::train::PolicyRow,
) -> f32 {
    let device = decoder.embed.val().device();
    let packed = Packed::new(&[row.tokens.as_slice()], &device);
    let (lp, _) = token_logprobs(decoder, &model.rope, packed.ids, false);
    let lp = host(lp.inner());
    let (sum, n) = lp
        .iter()
        .zip(&row.mask[1..])
        .filter(|(_, m)| **m > 0.0)
        .fold((0.0, 0.0), |(s, n), (x, _)| (s + x, n + 1.0));
    sum / n
}

#[test]
fn a_policy_update_follows_the_advantages_and_micro_batching_does_not_change_it() {
    use agentfly_trainer::train::{Actor, TrainSection, policy_update};
    let device = autodiff();
    let model = load(&device);
    let rows = rows(1.0);
    // Small enough that the second epoch's ratios stay inside the clip range (a larger
    // step clips every token and the second epoch's gradient is zero, as PPO intends).
    let optim = OptimConfig {
        lr: 2e-4,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let actor = |_: ()| Actor::new(model.decoder.clone(), model.rope.clone(), optim.clone(), 10);
    let before: Vec<f32> = rows
        .iter()
        .map(|r| mean_logprob(&model, &model.decoder, r))
        .collect();

    let mut whole = actor(());
    let config = TrainSection {
        ppo_epochs: 2,
        ..TrainSection::default()
    };
    let report = policy_update(&mut whole, &mut None, None, &rows, &config, 0);
    assert_eq!((report.updates, report.micro_batches), (2, 1), "{report:?}");
    assert!(report.skipped.is_none());
    assert_eq!(report.tokens, 8);
    assert!(
        report.grad_norm > 0.0 && report.ratio_deviation.abs() > 0.0,
        "{report:?}"
    );
    let after: Vec<f32> = rows
        .iter()
        .map(|r| mean_logprob(&model, whole.decoder(), r))
        .collect();
    assert!(
        after[0] > before[0],
        "positive advantage: {} -> {}",
        before[0],
        after[0]
    );
    assert!(
        after[1] < before[1],
        "negative advantage: {} -> {}",
        before[1],
        after[1]
    );
    assert_eq!(whole.step, 1);

    // One sequence per micro-batch: the same update.
    let mut split = actor(());
    let report = policy_update(
        &mut split,
        &mut None,
        None,
        &rows,
        &TrainSection {
            micro_batch_tokens: 9,
            ..config.clone()
        },
        0,
    );
    assert_eq!(report.micro_batches, 2);
    let a = values(whole.decoder().norm.weight.val());
    let b = values(split.decoder().norm.weight.val());
    let diff = max_diff(&a, &b);
    assert!(diff < 1e-5, "max |Δw| = {diff}");

    // Non-finite advantages: the update is skipped and the weights are untouched.
    let mut guarded = actor(());
    let report = policy_update(
        &mut guarded,
        &mut None,
        None,
        &self::rows(f32::NAN),
        &TrainSection::default(),
        0,
    );
    assert_eq!(report.updates, 0);
    assert!(
        report
            .skipped
            .as_deref()
            .unwrap()
            .contains("update skipped"),
        "{report:?}"
    );
    let w0 = values(model.decoder.norm.weight.val());
    let w1 = values(guarded.decoder().norm.weight.val());
    assert_eq!(w0, w1);
    assert_eq!(guarded.step, 0);
}

#[test]
fn micro_batches_respect_the_token_budget() {
    use agentfly_trainer::train::micro_batches;
    let groups = micro_batches(&[10, 3, 7, 7, 2], 20);
    // Longest first, the rows packed end to end: [10, 7] (17; another 7 would make 24),
    // then [7, 3, 2] (12).
    assert_eq!(groups, vec![vec![0, 2], vec![3, 1, 4]]);
    assert_eq!(
        micro_batches(&[50], 10),
        vec![vec![0]],
        "a long row is alone"
    );
}

#[test]
fn logprobs_at_chosen_positions_equal_the_full_pass() {
    use agentfly_trainer::train::logprobs_at;
    let device = common::device();
    let model = load(&device);
    let (seqs, _) = batch();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let len = packed.len();
    let (full, full_entropy) =
        token_logprobs(&model.decoder, &model.rope, packed.ids.clone(), true);
    let (full, full_entropy) = (host(full), host(full_entropy.unwrap()));
    let picks = [(0usize, 0usize), (0, 5), (1, 2), (1, 4), (0, 7)];
    let targets: Vec<u32> = picks.iter().map(|&(r, t)| seqs[r][t + 1]).collect();
    let at = logprobs_at(
        &model.decoder,
        &model.rope,
        packed.ids,
        &picks,
        &targets,
        true,
        1.0,
    );
    let (lp, entropy) = (values(at.logprobs), values(at.entropy.unwrap()));
    for (k, &(r, t)) in picks.iter().enumerate() {
        let at = r * (len - 1) + t;
        assert!(
            (lp[k] - full[at]).abs() < 1e-5,
            "{:?}: {} vs {}",
            (r, t),
            lp[k],
            full[at]
        );
        assert!((entropy[k] - full_entropy[at]).abs() < 1e-4);
    }
}

#[test]
fn the_critic_fits_its_returns_without_touching_the_policy() {
    use agentfly_trainer::train::{Actor, Critic, TrainSection, ValueHead, policy_update};
    let device = autodiff();
    let model = load(&device);
    let optim = OptimConfig {
        lr: 5e-2,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let mut critic = Some(Critic::new(
        ValueHead::new(model.config.hidden_size, &device),
        &optim,
        None,
    ));
    let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), optim, 10);
    let mut rows = rows(0.0);
    let mut losses = Vec::new();
    for _ in 0..15 {
        let values = critic.as_ref().unwrap().values(&actor, &rows, 4096);
        for (row, v) in rows.iter_mut().zip(values) {
            // The target: 1 on every learned token.
            row.returns = row.mask.clone();
            row.old_values = v;
        }
        let report = policy_update(
            &mut actor,
            &mut critic,
            None,
            &rows,
            &TrainSection::default(),
            0,
        );
        losses.push(report.value_loss);
    }
    assert!(losses[0] > 0.4, "a zero head starts at ½·1²: {losses:?}");
    assert!(
        losses[14] < losses[0] * 0.5,
        "the value loss falls: {losses:?}"
    );
    // Zero advantages: the policy's surrogate has no gradient; the critic's loss does not
    // reach the trunk.
    let a = values(model.decoder.norm.weight.val());
    let b = values(actor.decoder().norm.weight.val());
    assert!(max_diff(&a, &b) < 1e-6, "the policy did not move");
}

#[test]
fn the_kl_estimators_have_the_gradients_their_docs_say() {
    let device = autodiff();
    let policy = [-1.0f32, -2.0, -0.5, -3.0];
    let reference = [-1.5f32, -1.0, -0.5, -2.0];
    let w = 0.25;
    let gradient = |estimator: KlEstimator| {
        let logprobs = t2(policy.to_vec(), [1, 4], &device).require_grad();
        let loss = policy_loss(
            PolicyLossInput {
                logprobs: logprobs.clone(),
                old_logprobs: logprobs.clone().detach(),
                ref_logprobs: Some(t2(reference.to_vec(), [1, 4], &device)),
                advantages: t2(vec![0.0; 4], [1, 4], &device),
                weights: t2(vec![w; 4], [1, 4], &device),
                entropy: None,
            },
            &PolicyLossConfig {
                kl_coef: 1.0,
                kl_estimator: estimator,
                ..PolicyLossConfig::default()
            },
        );
        values(logprobs.grad(&loss.loss.backward()).unwrap())
    };
    // k2 = (log π − log π_ref)² / 2: its gradient is w · (log π − log π_ref), the reverse
    // KL's score-function weight.
    let k2 = gradient(KlEstimator::K2);
    for (i, g) in k2.iter().enumerate() {
        let want = w * (policy[i] - reference[i]);
        assert!((g - want).abs() < 1e-6, "k2 token {i}: {g} vs {want}");
    }
    // k1's gradient is the constant w whatever the two policies: its expectation under π
    // is zero, so as a penalty it does nothing.
    assert!(
        gradient(KlEstimator::K1)
            .iter()
            .all(|g| (g - w).abs() < 1e-6),
        "k1"
    );
    // k3's is w · (1 − π_ref/π): zero where they agree (token 2).
    let k3 = gradient(KlEstimator::K3);
    assert!(k3[2].abs() < 1e-6, "{k3:?}");
}

#[test]
fn several_steps_per_batch_move_the_ratio_and_the_clip_acts() {
    use agentfly_trainer::train::{Actor, TrainSection, policy_update};
    let device = autodiff();
    let model = load(&device);
    let optim = OptimConfig {
        lr: 3e-3,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let run = |ppo_epochs: usize, mini_batches: usize| {
        let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), optim.clone(), 10);
        let config = TrainSection {
            ppo_epochs,
            mini_batches,
            ..TrainSection::default()
        };
        policy_update(&mut actor, &mut None, None, &rows(1.0), &config, 0)
    };
    // One step per batch: the ratio is 1 throughout, nothing is clipped (plain policy
    // gradient).
    let one = run(1, 1);
    assert_eq!(one.updates, 1);
    assert_eq!(one.clip_fraction, 0.0, "{one:?}");
    // Two epochs of two mini-batches: four steps, the later ones off-policy and clipped.
    let four = run(2, 2);
    assert_eq!(four.updates, 4, "{four:?}");
    assert!(four.clip_fraction > 0.0, "{four:?}");
    assert!(four.ratio_deviation.abs() > 0.0, "{four:?}");
}

#[test]
fn a_stale_batch_is_weighed_by_the_old_policy_over_the_behaviour_policy() {
    use agentfly_trainer::train::{Actor, TrainSection, policy_update};
    let device = autodiff();
    let model = load(&device);
    // Every learned token with advantage 1: the one-step surrogate is −Σ w·1, so the
    // reported policy loss is minus the mean weight of the learned tokens.
    let mut rows = rows(1.0);
    for row in &mut rows {
        row.advantages = row.mask.clone();
    }
    // The rollout log-probs the policy itself gives, shifted by `shift`: the behaviour
    // policy gave every sampled token exp(−shift) times the old policy's probability.
    let own: Vec<Vec<f32>> = rows
        .iter()
        .map(|row| {
            let packed = Packed::new(&[row.tokens.as_slice()], &device);
            host(
                token_logprobs(&model.decoder, &model.rope, packed.ids, false)
                    .0
                    .inner(),
            )
        })
        .collect();
    let behaviour = |shift: f32| {
        let mut rows = rows.clone();
        for (row, own) in rows.iter_mut().zip(&own) {
            row.rollout_logprobs = std::iter::once(None)
                .chain(own.iter().map(|lp| Some(lp - shift)))
                .collect();
        }
        rows
    };
    let update = |rows: &[agentfly_trainer::train::PolicyRow], staleness| {
        let mut actor = Actor::new(
            model.decoder.clone(),
            model.rope.clone(),
            OptimConfig::default(),
            10,
        );
        let report = policy_update(
            &mut actor,
            &mut None,
            None,
            rows,
            &TrainSection::default(),
            staleness,
        );
        (report, values(actor.decoder().norm.weight.val()))
    };
    let close = |a: f32, b: f32| (a - b).abs() < 1e-4;

    let (fresh, fresh_weights) = update(&behaviour(0.0), 0);
    assert!(close(fresh.pg_loss, -1.0), "{fresh:?}");
    assert!(close(fresh.behaviour_weight_mean, 1.0), "{fresh:?}");
    // Stale, but sampled by the old policy itself: every weight is 1, the same update.
    let (same, same_weights) = update(&behaviour(0.0), 1);
    assert!(close(same.pg_loss, -1.0), "{same:?}");
    assert!(max_diff(&fresh_weights, &same_weights) < 1e-6);
    // The behaviour policy gave the tokens 1/1.5 of the old one's probability: each
    // weighs 1.5 — for a stale batch only; a current one reports the weight, uncorrected.
    let shift = 1.5f32.ln();
    let (weighed, _) = update(&behaviour(shift), 1);
    assert!(close(weighed.behaviour_weight_mean, 1.5), "{weighed:?}");
    assert!(close(weighed.pg_loss, -1.5), "{weighed:?}");
    assert_eq!(weighed.behaviour_weight_truncated, 0.0);
    let (current, _) = update(&behaviour(shift), 0);
    assert!(close(current.pg_loss, -1.0), "{current:?}");
    assert!(close(current.behaviour_weight_mean, 1.5), "{current:?}");
    // A quarter of the old probability: 4, truncated at the cap of 2, on every token.
    let (truncated, _) = update(&behaviour(4f32.ln()), 1);
    assert!(close(truncated.pg_loss, -2.0), "{truncated:?}");
    assert!(close(truncated.behaviour_weight_mean, 2.0), "{truncated:?}");
    assert_eq!(truncated.behaviour_weight_truncated, 1.0);

    // Two optimizer steps on a fresh batch take the rollout's log-probs as the old ones
    // (the first mini-batch its own pass's): no scoring pass, and the same update as
    // scoring them where the rollout sampled with the old policy itself.
    let two_steps = |rows: &[agentfly_trainer::train::PolicyRow]| {
        let mut actor = Actor::new(
            model.decoder.clone(),
            model.rope.clone(),
            OptimConfig::default(),
            10,
        );
        let config = TrainSection {
            mini_batches: 2,
            ..TrainSection::default()
        };
        let report = policy_update(&mut actor, &mut None, None, rows, &config, 0);
        (report, values(actor.decoder().norm.weight.val()))
    };
    let (scored, scored_weights) = two_steps(&rows);
    let (recorded, recorded_weights) = two_steps(&behaviour(0.0));
    assert_eq!((scored.updates, recorded.updates), (2, 2));
    assert!(
        close(scored.pg_loss, recorded.pg_loss),
        "{scored:?}\n{recorded:?}"
    );
    assert!(max_diff(&scored_weights, &recorded_weights) < 1e-5);
    // Sampled at 1/1.5 of the old probability: the first mini-batch learns at ratio 1
    // and measures the gap; the second's ratio against the rollout is 1.5, clipped at
    // 1.2 on every token (its surrogate −1.2).
    let (shifted, _) = two_steps(&behaviour(shift));
    assert!(close(shifted.logprob_gap_mean, shift), "{shifted:?}");
    assert!(close(shifted.pg_loss, -1.1), "{shifted:?}");
    assert!(close(shifted.clip_fraction, 0.5), "{shifted:?}");
}

#[test]
fn turn_rows_learn_each_sampled_token_once_and_match_the_trajectory_under_token_mean() {
    use agentfly_core::rollout::{Trajectory, Turn};
    use agentfly_trainer::run::turn_rows;
    use agentfly_trainer::train::{Actor, PolicyRow, TrainSection, policy_update};
    // A prompt of 2, turn 1 samples 3 and gets 2 back, turn 2 samples 2 (ends the chain).
    let tokens: Vec<u32> = vec![5, 17, 200, 31, 9, 44, 101, 7, 12];
    let loss_mask = vec![0, 0, 1, 1, 1, 0, 0, 1, 1];
    let t = Trajectory {
        tokens: tokens.clone(),
        loss_mask: loss_mask.clone(),
        logprobs: loss_mask.iter().map(|&m| -0.5 * f32::from(m)).collect(),
        prompt_len: 2,
        turns: vec![
            Turn {
                start: 2,
                model_end: 5,
                end: 7,
                ..Turn::default()
            },
            Turn {
                start: 7,
                model_end: 9,
                end: 9,
                ..Turn::default()
            },
        ],
        ..Trajectory::default()
    };
    let mask: Vec<f32> = loss_mask.iter().map(|&m| f32::from(m)).collect();
    let row = PolicyRow {
        tokens,
        advantages: mask.iter().map(|m| m * 0.8).collect(),
        rollout_logprobs: t
            .loss_mask
            .iter()
            .zip(&t.logprobs)
            .map(|(&m, &lp)| (m == 1).then_some(lp))
            .collect(),
        mask,
        ..PolicyRow::default()
    };
    let turns = turn_rows(&row, &t);
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].tokens, row.tokens[..7]);
    assert_eq!(turns[1].tokens, row.tokens);
    assert_eq!(turns[0].mask, [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
    assert_eq!(turns[1].mask, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    assert!(turns[1].rollout_logprobs[..7].iter().all(Option::is_none));
    assert_eq!(turns[1].rollout_logprobs[7], Some(-0.5));

    // One update each way: the same weights under token-mean, not under a sequence mean.
    let device = autodiff();
    let model = load(&device);
    let optim = OptimConfig {
        lr: 1e-3,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let update = |rows: &[PolicyRow], aggregation: LossAggregation| {
        let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), optim.clone(), 10);
        let mut config = TrainSection::default();
        config.loss.aggregation = aggregation;
        let report = policy_update(&mut actor, &mut None, None, rows, &config, 0);
        assert_eq!(report.tokens, 5, "{report:?}");
        values(actor.decoder().norm.weight.val())
    };
    let whole = update(std::slice::from_ref(&row), LossAggregation::TokenMean);
    let split = update(&turns, LossAggregation::TokenMean);
    let diff = max_diff(&whole, &split);
    assert!(diff < 1e-5, "token-mean: max |Δw| = {diff}");
    let whole = update(
        std::slice::from_ref(&row),
        LossAggregation::SeqMeanTokenMean,
    );
    let split = update(&turns, LossAggregation::SeqMeanTokenMean);
    let diff = max_diff(&whole, &split);
    assert!(
        diff > 1e-5,
        "a sequence mean weighs turns apart: max |Δw| = {diff}"
    );
}
