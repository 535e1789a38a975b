//! What a reward function gives back.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A scalar reward plus named metrics (e.g. `correct`, `format_ok`) for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardOutput {
    /// The reward the estimator sees.
    pub reward: f32,
    /// Extra numbers logged with it.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
}

impl RewardOutput {
    /// A reward with no metrics.
    pub fn new(reward: f32) -> Self {
        Self {
            reward,
            metrics: BTreeMap::new(),
        }
    }

    /// Adds a metric.
    pub fn with_metric(mut self, name: impl Into<String>, value: f64) -> Self {
        self.metrics.insert(name.into(), value);
        self
    }
}

/// What a `#[reward]` function may return: `f32` or [`RewardOutput`].
#[diagnostic::on_unimplemented(
    message = "a #[reward] returns `f32` or `RewardOutput` (or a `Result` of one), not `{Self}`"
)]
pub trait IntoRewardOutput {
    /// The conversion.
    fn into_reward_output(self) -> RewardOutput;
}

impl IntoRewardOutput for f32 {
    fn into_reward_output(self) -> RewardOutput {
        RewardOutput::new(self)
    }
}

impl IntoRewardOutput for RewardOutput {
    fn into_reward_output(self) -> RewardOutput {
        self
    }
}
