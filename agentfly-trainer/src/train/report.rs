//! What an update did: the numbers each step reports.

use serde::{Deserialize, Serialize};

/// What an update did. Loss parts, clip fraction, ratio and gradient norm are means over
/// the optimizer steps of the batch (epochs × mini-batches).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepReport {
    /// The loss.
    pub loss: f32,
    /// The clipped surrogate part.
    pub pg_loss: f32,
    /// The KL to the reference (0 without one).
    pub kl: f32,
    /// The entropy of the policy on the learned tokens.
    pub entropy: f32,
    /// Share of learned tokens whose ratio was clipped.
    pub clip_fraction: f32,
    /// Mean `ratio − 1` (0 on the first epoch, up to numerics).
    pub ratio_deviation: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    /// The critic's clipped value loss (0 without a critic).
    pub value_loss: f32,
    /// The learning rate used.
    pub lr: f64,
    /// Tokens the loss applied to.
    pub tokens: usize,
    /// Micro-batches per epoch.
    pub micro_batches: usize,
    /// Tokens of the rows learned from (prompts and observations included).
    pub row_tokens: usize,
    /// Positions the network ran for them per epoch: each micro-batch's rows past the
    /// prefix they share, padded to the longest, and that prefix once.
    pub computed_tokens: usize,
    /// Of those, the padding: positions past a row's end, up to its micro-batch's longest.
    pub padded_tokens: usize,
    /// Optimizer steps applied (not skipped).
    pub updates: usize,
    /// Mean |trainer's log-prob − rollout's| over the sampled tokens of the batch, before
    /// any update: the two must agree (0 up to numerics) when the batch is the current
    /// policy's; a gap means the trainer scores another distribution than the one sampled
    /// from. A stale batch's gap adds how far the last update moved the policy.
    pub logprob_gap_mean: f32,
    /// The largest such gap.
    pub logprob_gap_max: f32,
    /// Mean over the learned tokens of the behaviour weight `π_old / π_behaviour`,
    /// truncated at `behaviour_weight_cap` (1 up to numerics for a batch of the current
    /// policy's; it weighs the loss only for a stale one).
    pub behaviour_weight_mean: f32,
    /// Share of learned tokens whose behaviour weight was truncated.
    pub behaviour_weight_truncated: f32,
    /// Why an epoch's update was skipped, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}
