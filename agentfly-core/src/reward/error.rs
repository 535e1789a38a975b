//! Why scoring failed.

use crate::tool::EnvUnavailable;

/// Scoring a trajectory failed. Each variant names the reward and, where it applies, the
/// sample and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RewardError {
    /// The sample lacks a field the reward takes.
    #[error(
        "reward `{reward}`: sample `{sample_id}` has no field `{field}` (its fields: {})",
        available.join(", ")
    )]
    MissingField {
        /// The reward.
        reward: String,
        /// The field it takes.
        field: String,
        /// The sample.
        sample_id: String,
        /// The fields the sample has.
        available: Vec<String>,
    },
    /// The sample's field has the wrong type.
    #[error("reward `{reward}`: field `{field}` of sample `{sample_id}`: {message}")]
    InvalidField {
        /// The reward.
        reward: String,
        /// The field.
        field: String,
        /// The sample.
        sample_id: String,
        /// What serde said.
        message: String,
    },
    /// The reward needs an environment the chain neither holds nor can lease.
    #[error("reward: {0}")]
    Environment(#[from] EnvUnavailable),
    /// The reward returned `Err`.
    #[error("reward `{reward}` failed: {message}")]
    Failed {
        /// The reward.
        reward: String,
        /// Its error, displayed.
        message: String,
    },
    /// The reward panicked.
    #[error("reward `{reward}` panicked: {message}")]
    Panicked {
        /// The reward.
        reward: String,
        /// The panic message.
        message: String,
    },
    /// The reward ran past its timeout.
    #[error("reward `{reward}` timed out after {after_ms} ms")]
    TimedOut {
        /// The reward.
        reward: String,
        /// The timeout.
        after_ms: u64,
    },
    /// The reward returned NaN or infinity.
    #[error("reward `{reward}` returned {value}, which is not a finite number")]
    NotFinite {
        /// The reward.
        reward: String,
        /// The value.
        value: f32,
    },
    /// No reward of that name is in the set.
    #[error("unknown reward `{name}`; the rewards here are: {}", known.join(", "))]
    UnknownReward {
        /// The name asked for.
        name: String,
        /// The names in the set.
        known: Vec<String>,
    },
}
