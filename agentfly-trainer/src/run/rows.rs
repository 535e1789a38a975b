//! Trajectories → training rows: the data-flow step between the rollout and the update.
//! Trajectories with nothing sampled are left out; each row gets its effective loss mask
//! (the sampled tokens, or everything after the prompt when `algorithm.mask` is off) and
//! per-token advantages from the configured estimator (with the reference's per-token KL
//! for REINFORCE++, and the critic's values and returns for GAE).

use super::config::{AlgorithmSection, RowShape};
use crate::train::{Actor, Critic, PolicyRow, Reference};
use agentfly_core::rl::{RlError, Scored};
use agentfly_core::rollout::Trajectory;

/// What the estimator reads besides the trajectories.
pub struct RowInputs<'a> {
    /// The estimator and the masking.
    pub algorithm: &'a AlgorithmSection,
    /// The policy (for the KL to the reference and the critic's hidden states).
    pub actor: &'a Actor,
    /// The reference, for estimators with the KL in the reward.
    pub reference: Option<&'a Reference>,
    /// The critic, for GAE.
    pub critic: Option<&'a Critic>,
    /// Padded tokens per scoring micro-batch.
    pub budget: usize,
}

/// The loss mask of `t`: its sampled tokens, or (`mask` off) every token after the prompt.
pub fn effective_mask(t: &Trajectory, mask: bool) -> Vec<u8> {
    if mask {
        t.loss_mask.clone()
    } else {
        (0..t.tokens.len())
            .map(|i| u8::from(i >= t.prompt_len))
            .collect()
    }
}

/// The rows to learn from, with their advantages.
pub fn training_rows(
    trajectories: &[Trajectory],
    inputs: &RowInputs<'_>,
) -> Result<Vec<PolicyRow>, RlError> {
    let usable: Vec<&Trajectory> = trajectories
        .iter()
        .filter(|t| t.tokens.len() >= 2 && t.sampled_tokens() > 0)
        .collect();
    let masks: Vec<Vec<u8>> = usable
        .iter()
        .map(|t| effective_mask(t, inputs.algorithm.mask))
        .collect();
    let items: Vec<Scored<'_>> = usable
        .iter()
        .zip(&masks)
        .map(|(t, m)| Scored {
            group: &t.sample_id,
            reward: t.reward.unwrap_or(0.0),
            mask: m,
        })
        .collect();
    let estimator = &inputs.algorithm.estimator;
    let kl = match (estimator.needs_kl(), inputs.reference) {
        (true, Some(reference)) => {
            let tokens: Vec<&[u32]> = usable.iter().map(|t| t.tokens.as_slice()).collect();
            Some(reference.kl(inputs.actor, &tokens, inputs.budget))
        }
        _ => None,
    };
    let mut rows: Vec<PolicyRow> = usable
        .iter()
        .zip(&masks)
        .map(|(t, m)| PolicyRow {
            tokens: t.tokens.clone(),
            mask: m.iter().map(|&x| f32::from(x)).collect(),
            rollout_logprobs: t
                .loss_mask
                .iter()
                .zip(&t.logprobs)
                .map(|(&sampled, &lp)| (sampled == 1).then_some(lp))
                .collect(),
            ..PolicyRow::default()
        })
        .collect();
    let values = match (estimator.needs_values(), inputs.critic) {
        (true, Some(critic)) => Some(critic.values(inputs.actor, &rows, inputs.budget)),
        _ => None,
    };
    let computed = estimator.compute(&items, kl.as_deref(), values.as_deref())?;
    for (k, row) in rows.iter_mut().enumerate() {
        row.advantages = computed.advantages[k].clone();
        if let (Some(values), Some(returns)) = (&values, computed.returns.get(k)) {
            row.returns = returns.clone();
            row.old_values = values[k].clone();
        }
    }
    Ok(match inputs.algorithm.rows {
        RowShape::Trajectory => rows,
        RowShape::Turns => rows
            .iter()
            .zip(&usable)
            .flat_map(|(row, t)| turn_rows(row, t))
            .collect(),
    })
}

/// `row` (a whole trajectory's, advantages computed) as one row per turn of `t`: the
/// tokens up to the turn's end, learning only on the turn's own span.
pub fn turn_rows(row: &PolicyRow, t: &Trajectory) -> Vec<PolicyRow> {
    let cut = |v: &[f32], end: usize| v.get(..end).map(<[f32]>::to_vec).unwrap_or_default();
    t.turns
        .iter()
        .filter_map(|turn| {
            let end = turn.end.max(turn.model_end).min(row.tokens.len());
            let start = turn.start.min(end);
            let mut mask = cut(&row.mask, end);
            mask[..start].iter_mut().for_each(|m| *m = 0.0);
            let learns = mask.iter().any(|&m| m > 0.0);
            learns.then(|| PolicyRow {
                tokens: row.tokens[..end].to_vec(),
                mask,
                advantages: cut(&row.advantages, end),
                returns: cut(&row.returns, end),
                old_values: cut(&row.old_values, end),
                rollout_logprobs: row
                    .rollout_logprobs
                    .get(..end)
                    .map(|lp| {
                        lp.iter()
                            .enumerate()
                            .map(|(i, &p)| if i < start { None } else { p })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Mean advantage and mean |advantage| of `learned` (the learned tokens' advantages).
pub fn advantage_means(learned: &[f64]) -> Option<(f64, f64)> {
    let n = learned.len() as f64;
    (!learned.is_empty()).then(|| {
        (
            learned.iter().sum::<f64>() / n,
            learned.iter().map(|a| a.abs()).sum::<f64>() / n,
        )
    })
}

/// The advantages of the learned tokens of `rows`.
pub fn learned_advantages(rows: &[PolicyRow]) -> Vec<f64> {
    rows.iter()
        .flat_map(|r| {
            r.mask
                .iter()
                .zip(&r.advantages)
                .filter(|(m, _)| **m > 0.0)
                .map(|(_, a)| f64::from(*a))
        })
        .collect()
}
