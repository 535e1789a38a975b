//! One policy update of the PPO family: old (and reference) log-probs in one no-grad pass
//! per micro-batch, then `ppo_epochs` passes of the masked clipped loss (with the critic's
//! clipped value loss under GAE) with exact gradient accumulation, global-norm clipping and
//! AdamW — an epoch is skipped, with the reason, when anything is not finite.

use super::actor::Actor;
use super::config::TrainSection;
use super::critic::Critic;
use super::loss::{PolicyLossInput, aggregation_weights, policy_loss};
use super::optim::clip_grad_norm;
use super::reference::Reference;
use super::report::StepReport;
use super::rows::{Picks, PolicyRow, learned_masks, micro_batches_of};
use super::score::{host, pass, row_tensor, score};
use super::value::value_loss;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Tensor, TensorData};

/// One batch: `config.ppo_epochs` updates of `actor` (and of `critic`, when there is one and
/// the rows carry returns) on `rows`, each at least 2 tokens long. `reference` is needed
/// for a KL term in the loss (`loss.kl_coef`) or to report the KL (`track_kl`).
pub fn policy_update(
    actor: &mut Actor,
    critic: &mut Option<Critic>,
    reference: Option<&Reference>,
    rows: &[PolicyRow],
    config: &TrainSection,
) -> StepReport {
    let groups = micro_batches_of(rows, config.micro_batch_tokens);
    let old = score(&actor.snapshot(), actor.rope(), rows, &groups, None).0;
    let ref_logprobs = if config.loss.kl_coef != 0.0 || config.track_kl {
        reference.map(|r| r.logprobs(actor.rope(), rows, &groups))
    } else {
        None
    };
    let masks = learned_masks(rows);
    let weights = aggregation_weights(&masks, config.loss.aggregation);
    let lr = actor.lr();
    let mut report = StepReport {
        lr,
        tokens: masks.iter().flatten().filter(|&&m| m > 0.0).count(),
        micro_batches: groups.len(),
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
    for _ in 0..config.ppo_epochs.max(1) {
        let decoder = actor.take();
        let device = decoder.embed.val().device();
        let mut accumulator = GradientsAccumulator::new();
        let mut critic_grads = GradientsAccumulator::new();
        let mut parts = [0.0f32; 5];
        let mut loss_total = 0.0f32;
        let mut value_total = 0.0f32;
        for group in &groups {
            // The entropy is reported even when it is not in the loss.
            let Some((Picks { at, .. }, got)) = pass(&decoder, actor.rope(), rows, group, true)
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
            let out = policy_loss(
                PolicyLossInput {
                    logprobs: got.logprobs.unsqueeze_dim::<2>(0),
                    old_logprobs: gather(&|i, t| old[i][t]),
                    ref_logprobs: ref_logprobs.as_ref().map(|r| gather(&|i, t| r[i][t])),
                    advantages: gather(&|i, t| rows[i].advantages[t + 1]),
                    weights: gather(&|i, t| weights[i][t]),
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
                critic_grads.accumulate(&c.head, GradientsParams::from_module(&mut grads, &c.head));
            }
            accumulator.accumulate(&decoder, GradientsParams::from_grads(grads, &decoder));
        }
        let mut grads = accumulator.grads();
        let norm = clip_grad_norm(&decoder, &mut grads, max_norm);
        report.loss = loss_total;
        [
            report.pg_loss,
            report.kl,
            report.entropy,
            report.clip_fraction,
            report.ratio_deviation,
        ] = parts;
        report.grad_norm = norm;
        report.value_loss = value_total;
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
    if report.updates > 0 {
        actor.step += 1;
    }
    report
}
