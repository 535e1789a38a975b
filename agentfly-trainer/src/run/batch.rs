//! A rolled-out batch waiting for its update (`rollout.overlap` keeps one between steps),
//! and its place in a checkpoint.

use super::error::{TrainError, io};
use agentfly_core::rollout::Trajectory;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file of a checkpoint that holds the batch rolled out for the next step.
pub(super) const PENDING_FILE: &str = "pending.json";

/// A rolled-out batch, waiting for its update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Batch {
    /// Every trajectory of every round.
    pub(super) all: Vec<Trajectory>,
    /// Those to learn from (never one without a reward).
    pub(super) trained: Vec<Trajectory>,
    /// Groups dropped by dynamic sampling.
    pub(super) dropped: usize,
    /// Rollout rounds.
    pub(super) rounds: usize,
    /// Seconds the rollout took.
    pub(super) seconds: f64,
    /// Steps done when it was rolled out: the engine had that step's weights.
    pub(super) policy_step: usize,
}

impl Batch {
    /// Reads a checkpoint's pending batch, when it has one.
    pub(super) fn read(checkpoint: &Path) -> Result<Option<Self>, TrainError> {
        let path = checkpoint.join(PENDING_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map(Some).map_err(io(&path))
    }
}
