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

/// Updates between the weights that sampled `t` (its oldest turn's policy version, or
/// `policy_step` for a trajectory without turns) and step `step`'s update (0-based).
pub(super) fn staleness(t: &Trajectory, step: usize, policy_step: usize) -> usize {
    let version = t
        .turns
        .iter()
        .map(|turn| turn.policy_version as usize)
        .min()
        .unwrap_or(policy_step);
    step.saturating_sub(version)
}

/// `trained` without the groups (all chains of a sample) that hold a trajectory more than
/// `bound` updates stale at step `step`, and how many trajectories that drops.
pub(super) fn within_staleness(
    trained: &[Trajectory],
    step: usize,
    policy_step: usize,
    bound: usize,
) -> (Vec<Trajectory>, usize) {
    let stale: std::collections::HashSet<&str> = trained
        .iter()
        .filter(|t| staleness(t, step, policy_step) > bound)
        .map(|t| t.sample_id.as_str())
        .collect();
    let kept: Vec<Trajectory> = trained
        .iter()
        .filter(|t| !stale.contains(t.sample_id.as_str()))
        .cloned()
        .collect();
    let dropped = trained.len() - kept.len();
    (kept, dropped)
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentfly_core::rollout::Turn;

    fn sampled(sample: &str, versions: &[u64]) -> Trajectory {
        Trajectory {
            sample_id: sample.into(),
            turns: versions
                .iter()
                .map(|&policy_version| Turn {
                    policy_version,
                    ..Turn::default()
                })
                .collect(),
            ..Trajectory::default()
        }
    }

    #[test]
    fn staleness_counts_from_the_oldest_turn_and_stale_groups_go_whole() {
        let batch = [
            sampled("a", &[3, 3]),
            sampled("a", &[2, 3]),
            sampled("b", &[3]),
            sampled("c", &[]),
        ];
        assert_eq!(staleness(&batch[0], 3, 0), 0);
        assert_eq!(staleness(&batch[1], 3, 0), 1);
        assert_eq!(staleness(&batch[3], 3, 1), 2, "no turns: the batch's step");
        let (kept, dropped) = within_staleness(&batch, 3, 3, 0);
        let ids: Vec<&str> = kept.iter().map(|t| t.sample_id.as_str()).collect();
        assert_eq!((ids, dropped), (vec!["b", "c"], 2));
        let (kept, dropped) = within_staleness(&batch, 3, 3, 1);
        assert_eq!((kept.len(), dropped), (4, 0));
    }
}
