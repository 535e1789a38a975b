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
    /// Passes over each batch (PPO epochs); the old log-probs stay those from before the
    /// first.
    pub ppo_epochs: usize,
    /// Optimizer steps per pass: the batch's rows split into this many mini-batches, each
    /// its own step. More than one step per batch (epochs × mini-batches) is what makes
    /// PPO's ratio move away from 1 and its clip act.
    pub mini_batches: usize,
    /// A micro-batch computes at most this many positions (at least one sequence): its rows
    /// laid end to end without padding, a prefix that all of them share counted once.
    pub micro_batch_tokens: usize,
    /// Recompute the memory-bound operations in the backward pass instead of keeping their
    /// outputs (`device::training`): about a quarter less peak memory for about 5% more
    /// time.
    pub gradient_checkpointing: bool,
    /// Weight of the critic's value loss (estimator `gae`).
    pub value_coef: f32,
    /// How far a value may move from its rollout-time value before the loss clips it.
    pub value_clip: f32,
    /// Report the KL to the reference policy (the starting model, or the model after
    /// `[sft]`) every step, even when `loss.kl_coef` is 0; costs a reference forward pass.
    pub track_kl: bool,
    /// A step stops the run with an error when more than this share of its trajectories
    /// got no reward (the reward function failed, or the chain did); below it, those
    /// trajectories are left out of the update and counted in the step's metrics.
    pub max_reward_failures: f64,
    /// A batch rolled out by an older policy than the one it updates (`rollout.overlap`)
    /// weighs each token's loss by `π_old(token) / π_behaviour(token)`, the old policy's
    /// probability over the one that sampled it, truncated at this cap (AReaL's decoupled
    /// PPO; PPO's ratio and clip are then taken against the old policy).
    pub behaviour_weight_cap: f32,
    /// The loss.
    pub loss: PolicyLossConfig,
}

impl TrainSection {
    /// Whether an update runs the reference model and measures the KL to it: for a KL
    /// penalty in the loss, or to report it (`track_kl`).
    pub fn measures_kl(&self) -> bool {
        self.loss.kl_coef != 0.0 || self.track_kl
    }
}

impl Default for TrainSection {
    fn default() -> Self {
        Self {
            steps: 10,
            seed: 0,
            ppo_epochs: 1,
            mini_batches: 1,
            micro_batch_tokens: 4096,
            gradient_checkpointing: true,
            value_coef: 0.5,
            value_clip: 0.2,
            track_kl: false,
            max_reward_failures: 0.1,
            behaviour_weight_cap: 2.0,
            loss: PolicyLossConfig::default(),
        }
    }
}
