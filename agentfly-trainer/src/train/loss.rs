//! Policy-gradient and supervised losses on per-token log-probabilities.
//!
//! Every loss is a weighted sum `Σ_t w_t · l_t`. The weights carry both the loss mask
//! (0 on tokens the model did not sample: the prompt, tool observations, padding) and the
//! aggregation, computed once for the whole batch by [`aggregation_weights`], so micro-
//! batches' losses add up to the batch's loss and gradient accumulation is exact. A masked
//! token has weight 0: its gradient is exactly zero.

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// How per-token losses become one number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossAggregation {
    /// Mean over every unmasked token of the batch (DAPO; long trajectories weigh more).
    #[default]
    TokenMean,
    /// Mean over sequences of each sequence's token mean (GRPO as published).
    SeqMeanTokenMean,
    /// Mean over sequences of each sequence's token sum (Dr. GRPO).
    SeqMeanTokenSum,
}

/// How the KL divergence to the reference policy is estimated per token, from
/// `d = log π_ref − log π` on tokens sampled from π (Schulman's k1, k2, k3).
///
/// As a *measurement* of KL(π ‖ π_ref) (what `train.track_kl` reports), k1 and k3 are
/// unbiased and k3 has the lower variance. As a *penalty* in the loss, what matters is the
/// gradient: k1's expected gradient is zero (`E_π[∇ log π] = 0`), so `kl_coef` with k1
/// penalises nothing; k2's gradient is exactly the reverse KL's (`E_π[d · ∇ log π]` up to
/// sign), so k2 is the penalty to use; k3 as a loss (verl's `low_var_kl`) has a biased
/// gradient that behaves like a forward-KL penalty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KlEstimator {
    /// `−d`: unbiased, high variance, can be negative. A measurement, not a penalty.
    K1,
    /// `d² / 2`: biased as a value, but its gradient is the reverse KL's. The penalty.
    K2,
    /// `exp(d) − d − 1`: unbiased, low variance, never negative. The measurement.
    #[default]
    K3,
}

/// The clipped surrogate and its penalties.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyLossConfig {
    /// The ratio may fall to `1 − clip_low`.
    pub clip_low: f32,
    /// The ratio may rise to `1 + clip_high` (> `clip_low`: DAPO's clip-higher).
    pub clip_high: f32,
    /// How token losses are combined.
    pub aggregation: LossAggregation,
    /// Weight of the KL penalty to the reference policy (0: no reference model needed).
    pub kl_coef: f32,
    /// The KL estimator.
    pub kl_estimator: KlEstimator,
    /// Weight of the entropy bonus (0: off).
    pub entropy_coef: f32,
}

impl Default for PolicyLossConfig {
    fn default() -> Self {
        Self {
            clip_low: 0.2,
            clip_high: 0.2,
            aggregation: LossAggregation::TokenMean,
            kl_coef: 0.0,
            kl_estimator: KlEstimator::K3,
            entropy_coef: 0.0,
        }
    }
}

/// Per-token weights for `masks` (one row per sequence, 1 where the token counts) such
/// that `Σ w·l` over the whole batch is the aggregated loss.
pub fn aggregation_weights(masks: &[Vec<f32>], aggregation: LossAggregation) -> Vec<Vec<f32>> {
    let total: f32 = masks.iter().flatten().sum();
    let rows = masks.iter().filter(|m| m.iter().any(|&x| x > 0.0)).count() as f32;
    masks
        .iter()
        .map(|m| {
            let own: f32 = m.iter().sum();
            let scale = match aggregation {
                LossAggregation::TokenMean if total > 0.0 => 1.0 / total,
                LossAggregation::SeqMeanTokenMean if own > 0.0 => 1.0 / (own * rows),
                LossAggregation::SeqMeanTokenSum if rows > 0.0 => 1.0 / rows,
                _ => 0.0,
            };
            m.iter().map(|&x| x * scale).collect()
        })
        .collect()
}

/// The inputs of [`policy_loss`], all `[batch, t]`.
#[derive(Debug, Clone)]
pub struct PolicyLossInput {
    /// Log-probs under the policy being trained (with gradient).
    pub logprobs: Tensor<2>,
    /// Log-probs under the policy that sampled (before this batch's updates).
    pub old_logprobs: Tensor<2>,
    /// Log-probs under the frozen reference model (needed when `kl_coef > 0`).
    pub ref_logprobs: Option<Tensor<2>>,
    /// Advantages.
    pub advantages: Tensor<2>,
    /// Aggregation weights, the mask folded in ([`aggregation_weights`]).
    pub weights: Tensor<2>,
    /// Entropies (needed when `entropy_coef > 0`; reported when given).
    pub entropy: Option<Tensor<2>>,
}

/// The loss and what it is made of, each aggregated with the same weights (so that,
/// summed over micro-batches, they are the batch's aggregates).
#[derive(Debug, Clone)]
pub struct PolicyLoss {
    /// The scalar to differentiate, `[1]`.
    pub loss: Tensor<1>,
    /// `[5]`: surrogate loss, KL, entropy, clipped fraction, mean ratio − 1 (no gradient).
    pub parts: Tensor<1>,
}

/// Clipped surrogate `max(−A·r, −A·clip(r, 1 − low, 1 + high))` plus `kl_coef · KL` minus
/// `entropy_coef · H`, weighted.
pub fn policy_loss(input: PolicyLossInput, config: &PolicyLossConfig) -> PolicyLoss {
    let PolicyLossInput {
        logprobs,
        old_logprobs,
        ref_logprobs,
        advantages,
        weights,
        entropy,
    } = input;
    let ratio = (logprobs.clone() - old_logprobs).clamp(-20.0, 20.0).exp();
    let unclipped = -advantages.clone() * ratio.clone();
    let clipped = -advantages
        * ratio
            .clone()
            .clamp(1.0 - config.clip_low, 1.0 + config.clip_high);
    let clip_active = clipped.clone().greater(unclipped.clone()).float();
    let surrogate = unclipped.max_pair(clipped);
    let mut per_token = surrogate.clone();
    let zero = || surrogate.zeros_like();
    let kl = match &ref_logprobs {
        Some(reference) => {
            let d = (reference.clone() - logprobs.clone()).clamp(-20.0, 20.0);
            match config.kl_estimator {
                KlEstimator::K1 => -d,
                KlEstimator::K2 => d.clone() * d * 0.5,
                KlEstimator::K3 => d.clone().exp() - d - 1.0,
            }
        }
        None => zero(),
    };
    if config.kl_coef != 0.0 {
        per_token = per_token + kl.clone() * config.kl_coef;
    }
    let entropy = entropy.unwrap_or_else(zero);
    if config.entropy_coef != 0.0 {
        per_token = per_token - entropy.clone() * config.entropy_coef;
    }
    let weighted = |t: Tensor<2>| (t * weights.clone()).sum();
    let parts = Tensor::cat(
        vec![
            weighted(surrogate),
            weighted(kl),
            weighted(entropy),
            weighted(clip_active),
            weighted(ratio - 1.0),
        ],
        0,
    )
    .detach();
    PolicyLoss {
        loss: weighted(per_token),
        parts,
    }
}

/// Masked cross-entropy (SFT): `−Σ w·log p`.
pub fn sft_loss(logprobs: Tensor<2>, weights: Tensor<2>) -> Tensor<1> {
    -(logprobs * weights).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_aggregate_as_named() {
        let masks = vec![vec![1.0, 1.0, 0.0], vec![0.0, 1.0, 0.0], vec![0.0; 3]];
        let w = aggregation_weights(&masks, LossAggregation::TokenMean);
        assert_eq!(
            w,
            vec![
                vec![1.0 / 3.0, 1.0 / 3.0, 0.0],
                vec![0.0, 1.0 / 3.0, 0.0],
                vec![0.0; 3]
            ]
        );
        let w = aggregation_weights(&masks, LossAggregation::SeqMeanTokenMean);
        assert_eq!(
            w,
            vec![vec![0.25, 0.25, 0.0], vec![0.0, 0.5, 0.0], vec![0.0; 3]]
        );
        let w = aggregation_weights(&masks, LossAggregation::SeqMeanTokenSum);
        assert_eq!(
            w,
            vec![vec![0.5, 0.5, 0.0], vec![0.0, 0.5, 0.0], vec![0.0; 3]]
        );
    }
}
