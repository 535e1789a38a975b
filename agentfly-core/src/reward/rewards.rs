//! A set of registered rewards, chosen by name, scored safely.

use super::{RewardError, RewardInput, RewardOutput, RewardSpec};
use crate::registry::{self, RegistryError};
use crate::tool::panic_message;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

/// The rewards a run may use. Scoring never panics: a panic, a timeout, a missing sample
/// field or a non-finite value is a [`RewardError`] naming the reward.
#[derive(Debug, Clone)]
pub struct Rewards {
    rewards: Vec<&'static RewardSpec>,
    default_timeout: Duration,
}

impl Rewards {
    /// The timeout of a reward that sets no `timeout_ms`.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

    /// Every reward linked into this binary, sorted by name. Fails when two share a name.
    pub fn all() -> Result<Self, RegistryError> {
        Ok(Self::with(registry::rewards()?))
    }

    /// The rewards named, in order; an unknown name fails with the list of known ones.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, RegistryError> {
        let all = registry::rewards()?;
        let chosen = registry::select(
            &all,
            names,
            |r| r.name,
            |name, known| RegistryError::UnknownReward { name, known },
        )?;
        Ok(Self::with(chosen))
    }

    fn with(rewards: Vec<&'static RewardSpec>) -> Self {
        Self {
            rewards,
            default_timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// Sets the timeout of rewards that set no `timeout_ms`.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The rewards, in order.
    pub fn rewards(&self) -> &[&'static RewardSpec] {
        &self.rewards
    }

    /// The reward names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.rewards.iter().map(|r| r.name).collect()
    }

    /// The reward called `name`.
    pub fn get(&self, name: &str) -> Option<&'static RewardSpec> {
        self.rewards.iter().copied().find(|r| r.name == name)
    }

    /// Scores with the reward `name`. Needs a tokio runtime with timers.
    pub async fn score(
        &self,
        name: &str,
        input: RewardInput<'_>,
    ) -> Result<RewardOutput, RewardError> {
        let spec = self.get(name).ok_or_else(|| RewardError::UnknownReward {
            name: name.to_string(),
            known: self.names().iter().map(|s| s.to_string()).collect(),
        })?;
        let timeout = spec
            .timeout_ms
            .map_or(self.default_timeout, Duration::from_millis);
        let guarded = AssertUnwindSafe((spec.score)(input)).catch_unwind();
        let output = match tokio::time::timeout(timeout, guarded).await {
            Err(_) => Err(RewardError::TimedOut {
                reward: spec.name.to_string(),
                after_ms: timeout.as_millis() as u64,
            }),
            Ok(Err(panic)) => Err(RewardError::Panicked {
                reward: spec.name.to_string(),
                message: panic_message(panic.as_ref()),
            }),
            Ok(Ok(result)) => result,
        }?;
        if !output.reward.is_finite() {
            return Err(RewardError::NotFinite {
                reward: spec.name.to_string(),
                value: output.reward,
            });
        }
        Ok(output)
    }

    /// [`score`](Self::score) on a runtime of its own, for code outside tokio.
    pub fn score_blocking(
        &self,
        name: &str,
        input: RewardInput<'_>,
    ) -> Result<RewardOutput, RewardError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RewardError::Failed {
                reward: name.to_string(),
                message: format!("could not start a runtime: {e}"),
            })?;
        let output = runtime.block_on(self.score(name, input));
        runtime.shutdown_background();
        output
    }
}
