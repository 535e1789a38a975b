//! `[train]`: the run's length and seed, and how each policy update runs. One definition:
//! the run's configuration file holds it as it is and the update reads it.

use super::loss::PolicyLossConfig;
use serde::{Deserialize, Serialize};

/// `[train]` (and `[train.loss]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainSection {
    /// Updates in the run.
    pub steps: usize,
    /// The run's seed (data order, sampling).
    pub seed: u64,
    /// Optimizer updates per batch (PPO epochs); the old log-probs stay those from before
    /// the first.
    pub ppo_epochs: usize,
    /// A micro-batch holds at most this many padded positions (at least one sequence).
    pub micro_batch_tokens: usize,
    /// Weight of the critic's value loss (estimator `gae`).
    pub value_coef: f32,
    /// How far a value may move from its rollout-time value before the loss clips it.
    pub value_clip: f32,
    /// Report the KL to the reference policy (the starting model, or the model after
    /// `[sft]`) every step, even when `loss.kl_coef` is 0; costs a reference forward pass.
    pub track_kl: bool,
    /// The loss.
    pub loss: PolicyLossConfig,
}

impl Default for TrainSection {
    fn default() -> Self {
        Self {
            steps: 10,
            seed: 0,
            ppo_epochs: 1,
            micro_batch_tokens: 4096,
            value_coef: 0.5,
            value_clip: 0.2,
            track_kl: false,
            loss: PolicyLossConfig::default(),
        }
    }
}
