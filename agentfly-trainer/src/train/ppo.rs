//! One policy update of the PPO family: old (and reference) log-probs in one no-grad pass
//! at the rollout's temperature (the old ones taken from the gradient pass itself when the
//! batch gets a single optimizer step, and from the rollout when a fresh batch gets
//! several), the gap between them and the rollout's own, then
//! `ppo_epochs` passes over the batch in `mini_batches` optimizer steps each — the masked
//! clipped loss (with the critic's clipped value loss under GAE), exact gradient
//! accumulation over micro-batches, global-norm clipping and AdamW. A step whose loss or
//! gradient is not finite is skipped, with the reason.
//!
//! A stale batch (rolled out by the policy before the old one) is corrected as AReaL's
//! decoupled PPO does: the ratio and its clip are taken against the old policy (the one
//! being updated), and each token's loss is weighed by the old policy's probability of it
//! over the behaviour policy's, `exp(old − rollout log-prob)`, truncated at
//! `behaviour_weight_cap`.

use super::actor::Actor;
use super::config::TrainSection;
use super::critic::Critic;
use super::loss::{PolicyLossInput, aggregation_weights, policy_loss};
use super::optim::clip_grad_norm;
use super::reference::Reference;
use super::report::StepReport;
use super::rows::{
    Picks, PolicyRow, computed_positions, learned_masks, micro_batches_among, micro_batches_of,
    padding_positions, split,
};
use super::score::{host, pass, row_tensor, score};
use super::value::value_loss;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Tensor, TensorData};

/// One batch: `config.ppo_epochs` passes of `config.mini_batches` updates of `actor` (and
/// of `critic`, when there is one and the rows carry returns) on `rows`, each at least 2
/// tokens long. `reference` is needed for a KL term in the loss (`loss.kl_coef`) or to
/// report the KL (`track_kl`). `staleness`: updates since the rows' rollout log-probs were
/// sampled; above 0 the loss is importance-weighted against them.
pub fn policy_update(
    actor: &mut Actor,
    critic: &mut Option<Critic>,
    reference: Option<&Reference>,
    rows: &[PolicyRow],
    config: &TrainSection,
    staleness: usize,
) -> StepReport {
    let cap = config.behaviour_weight_cap;
    let temperature = actor.temperature;
    let groups = micro_batches_of(rows, config.micro_batch_tokens);
    let minis = split(rows.len(), config.mini_batches);
    // The old log-probs, without a forward pass of their own where the batch allows:
    // - one optimizer step on the batch: the policy the loss differentiates is the one
    //   that scores it, so they are the gradient pass's own, detached (as verl does
    //   on-policy);
    // - several steps on a fresh batch (staleness 0) whose rollout recorded every learned
    //   token's log-prob: those (the behaviour policy is the old one), except the first
    //   mini-batch's, which its own first pass gives exactly and which measure the gap;
    // - otherwise they are scored first.
    let masks = learned_masks(rows);
    let on_policy = config.ppo_epochs.max(1) == 1 && minis.len() == 1;
    let from_rollout = !on_policy
        && staleness == 0
        && rows.iter().zip(&masks).all(|(row, mask)| {
            let recorded = |(t, &m): (usize, &f32)| m <= 0.0 || rollout_logprob(row, t).is_some();
            mask.iter().enumerate().all(recorded)
        });
    let mut old = if on_policy {
        rows.iter().map(|r| vec![0.0; r.tokens.len() - 1]).collect()
    } else if from_rollout {
        let recorded = |row: &PolicyRow| {
            (0..row.tokens.len() - 1)
                .map(|t| rollout_logprob(row, t).unwrap_or(0.0))
                .collect()
        };
        rows.iter().map(recorded).collect()
    } else {
        score(
            &actor.snapshot(),
            actor.rope(),
            rows,
            &groups,
            None,
            temperature,
        )
        .0
    };
    let ref_logprobs = if config.measures_kl() {
        reference.map(|r| r.logprobs(actor.rope(), rows, &groups, temperature))
    } else {
        None
    };
    let lr = actor.lr();
    let mut report = StepReport {
        lr,
        tokens: masks.iter().flatten().filter(|&&m| m > 0.0).count(),
        micro_batches: groups.len(),
        row_tokens: rows.iter().map(|r| r.tokens.len()).sum(),
        computed_tokens: groups.iter().map(|g| computed_positions(rows, g)).sum(),
        padded_tokens: groups.iter().map(|g| padding_positions(rows, g)).sum(),
        ..StepReport::default()
    };
    if config.loss.kl_coef != 0.0 && ref_logprobs.is_none() {
        report.skipped = Some("a KL penalty needs a reference model".into());
        return report;
    }
    let has_returns = rows
        .iter()
        .all(|r| r.returns.len() == r.tokens.len() && r.old_values.len() == r.tokens.len());
    let max_norm = actor.optim_config.max_grad_norm;
    // Each mini-batch's loss is aggregated over its own tokens.
    let weights: Vec<Vec<Vec<f32>>> = minis
        .iter()
        .map(|mini| {
            let own: Vec<Vec<f32>> = masks
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    if mini.contains(&i) {
                        m.clone()
                    } else {
                        vec![0.0; m.len()]
                    }
                })
                .collect();
            aggregation_weights(&own, config.loss.aggregation)
        })
        .collect();
    let mut sums = [0.0f32; 8];
    let mut attempted = 0;
    for epoch in 0..config.ppo_epochs.max(1) {
        for (m, (mini, weights)) in minis.iter().zip(&weights).enumerate() {
            // The weights have not moved yet: this pass's log-probs are the old ones.
            let own_old = on_policy || (from_rollout && epoch == 0 && m == 0);
            let decoder = actor.take();
            let device = decoder.embed.val().device();
            let mut accumulator = GradientsAccumulator::new();
            let mut critic_grads = GradientsAccumulator::new();
            let mut parts = [0.0f32; 5];
            let mut loss_total = 0.0f32;
            let mut value_total = 0.0f32;
            for group in micro_batches_among(rows, mini, config.micro_batch_tokens) {
                // The entropy is reported even when it is not in the loss.
                let Some((Picks { at, .. }, got)) =
                    pass(&decoder, actor.rope(), rows, &group, true, temperature)
                else {
                    continue;
                };
                let gather = |f: &dyn Fn(usize, usize) -> f32| {
                    row_tensor(at.iter().map(|&(i, t)| f(i, t)).collect(), &device)
                };
                let critic_loss = match (critic.as_ref(), has_returns) {
                    (Some(c), true) => {
                        let flat = |f: &dyn Fn(usize, usize) -> f32| {
                            let values: Vec<f32> = at.iter().map(|&(i, t)| f(i, t)).collect();
                            let n = values.len();
                            Tensor::<1>::from_data(TensorData::new(values, [n]), &device)
                        };
                        Some(value_loss(
                            c.head.forward(got.hidden),
                            flat(&|i, t| rows[i].old_values[t + 1]),
                            flat(&|i, t| rows[i].returns[t + 1]),
                            flat(&|i, t| weights[i][t]),
                            config.value_clip,
                        ))
                    }
                    _ => None,
                };
                let old_logprobs = if own_old {
                    let detached = got.logprobs.clone().detach();
                    for (&(i, t), v) in at.iter().zip(host(detached.clone())) {
                        old[i][t] = v;
                    }
                    detached.unsqueeze_dim::<2>(0)
                } else {
                    gather(&|i, t| old[i][t])
                };
                let token_weights = gather(&|i, t| {
                    let correction = if staleness > 0 {
                        behaviour_weight(&rows[i], &old[i], t, cap).0
                    } else {
                        1.0
                    };
                    weights[i][t] * correction
                });
                let out = policy_loss(
                    PolicyLossInput {
                        logprobs: got.logprobs.unsqueeze_dim::<2>(0),
                        old_logprobs,
                        ref_logprobs: ref_logprobs.as_ref().map(|r| gather(&|i, t| r[i][t])),
                        advantages: gather(&|i, t| rows[i].advantages[t + 1]),
                        weights: token_weights,
                        entropy: got.entropy.map(|e| e.unsqueeze_dim::<2>(0)),
                    },
                    &config.loss,
                );
                for (total, x) in parts.iter_mut().zip(host(out.parts)) {
                    *total += x;
                }
                loss_total += out.loss.clone().into_scalar::<f32>();
                let total = match critic_loss {
                    Some(v) => {
                        value_total += v.clone().into_scalar::<f32>();
                        out.loss + v * config.value_coef
                    }
                    None => out.loss,
                };
                let mut grads = total.backward();
                if let Some(c) = critic.as_ref() {
                    critic_grads
                        .accumulate(&c.head, GradientsParams::from_module(&mut grads, &c.head));
                }
                accumulator.accumulate(&decoder, GradientsParams::from_grads(grads, &decoder));
            }
            let mut grads = accumulator.grads();
            let norm = clip_grad_norm(&decoder, &mut grads, max_norm);
            attempted += 1;
            for (sum, x) in sums.iter_mut().zip([
                loss_total,
                parts[0],
                parts[1],
                parts[2],
                parts[3],
                parts[4],
                norm,
                value_total,
            ]) {
                *sum += x;
            }
            if !loss_total.is_finite() || !norm.is_finite() || !value_total.is_finite() {
                report.skipped = Some(format!(
                    "non-finite {} (loss {loss_total}, gradient norm {norm}): update skipped, weights unchanged",
                    if loss_total.is_finite() {
                        "gradient"
                    } else {
                        "loss"
                    }
                ));
                actor.put(decoder);
                continue;
            }
            actor.apply(decoder, grads, lr, None);
            if let Some(c) = critic.take() {
                *critic = Some(c.step(critic_grads.grads(), lr, max_norm));
            }
            report.updates += 1;
        }
    }
    // Where the old log-probs are the rollout's, only the first mini-batch's were measured.
    let measured: Vec<usize> = match (from_rollout, minis.first()) {
        (true, Some(first)) => first.clone(),
        _ => (0..rows.len()).collect(),
    };
    against_rollout(rows, &measured, &old, cap, &mut report);
    let mean = |x: f32| x / attempted.max(1) as f32;
    report.loss = mean(sums[0]);
    report.pg_loss = mean(sums[1]);
    report.kl = mean(sums[2]);
    report.entropy = mean(sums[3]);
    report.clip_fraction = mean(sums[4]);
    report.ratio_deviation = mean(sums[5]);
    report.grad_norm = mean(sums[6]);
    report.value_loss = mean(sums[7]);
    if report.updates > 0 {
        actor.step += 1;
    }
    report
}

/// The rollout's log-prob of the token `row`'s position `t` predicts (`t + 1`), where it
/// recorded one.
fn rollout_logprob(row: &PolicyRow, t: usize) -> Option<f32> {
    row.rollout_logprobs.get(t + 1).copied().flatten()
}

/// The behaviour weight of row `row`'s position `t` (predicting token `t + 1`) whose old
/// log-prob is `old[t]`: `exp(old − rollout log-prob)` truncated at `cap`, and whether it
/// was; (1, false) where the rollout recorded none.
fn behaviour_weight(row: &PolicyRow, old: &[f32], t: usize, cap: f32) -> (f32, bool) {
    match rollout_logprob(row, t) {
        Some(sampled) => {
            let w = (old[t] - sampled).exp();
            if w > cap { (cap, true) } else { (w, false) }
        }
        None => (1.0, false),
    }
}

/// How the old log-probs compare with the rollout's, over the tokens the rows learn from:
/// the mean and largest |gap| where the rollout recorded a log-prob (0, 0 where it recorded
/// none), and the mean behaviour weight and share truncated (a token without one weighs 1).
fn against_rollout(
    rows: &[PolicyRow],
    measured: &[usize],
    old: &[Vec<f32>],
    cap: f32,
    report: &mut StepReport,
) {
    let (mut gap_sum, mut gap_max, mut sampled) = (0.0f64, 0.0f32, 0usize);
    let (mut weight_sum, mut truncated, mut learned) = (0.0f64, 0usize, 0usize);
    for (row, old) in measured.iter().map(|&i| (&rows[i], &old[i])) {
        for (t, lp) in old.iter().enumerate() {
            if !(row.mask.is_empty() || row.mask[t + 1] > 0.0) {
                continue;
            }
            if let Some(rollout) = rollout_logprob(row, t) {
                let gap = (lp - rollout).abs();
                gap_sum += f64::from(gap);
                gap_max = gap_max.max(gap);
                sampled += 1;
            }
            let (w, cut) = behaviour_weight(row, old, t, cap);
            weight_sum += f64::from(w);
            truncated += usize::from(cut);
            learned += 1;
        }
    }
    report.logprob_gap_mean = (gap_sum / sampled.max(1) as f64) as f32;
    report.logprob_gap_max = gap_max;
    (
        report.behaviour_weight_mean,
        report.behaviour_weight_truncated,
    ) = if learned == 0 {
        (1.0, 0.0)
    } else {
        (
            (weight_sum / learned as f64) as f32,
            truncated as f32 / learned as f32,
        )
    };
}
