//! Dynamic sampling: only groups whose rewards differ are kept.

use crate::rollout::Trajectory;

/// Dynamic sampling (DAPO, L0): keeps only groups whose rewards differ (a group where
/// every chain got the same reward has zero advantage everywhere and teaches nothing),
/// across rollout rounds, until enough groups are kept.
#[derive(Debug, Clone, Default)]
pub struct GroupFilter {
    target: usize,
    kept: Vec<Vec<Trajectory>>,
    dropped: usize,
    rounds: usize,
}

impl GroupFilter {
    /// Collects up to `target_groups` informative groups.
    pub fn new(target_groups: usize) -> Self {
        Self {
            target: target_groups,
            ..Self::default()
        }
    }

    /// Adds one round of trajectories (grouped by sample id); returns how many of its
    /// groups were dropped.
    pub fn add(&mut self, trajectories: Vec<Trajectory>) -> usize {
        self.rounds += 1;
        let mut by_group: Vec<(String, Vec<Trajectory>)> = Vec::new();
        for t in trajectories {
            match by_group.iter_mut().find(|(g, _)| *g == t.sample_id) {
                Some((_, members)) => members.push(t),
                None => by_group.push((t.sample_id.clone(), vec![t])),
            }
        }
        let mut dropped = 0;
        for (_, members) in by_group {
            let first = members[0].reward.unwrap_or(0.0);
            let uniform = members.iter().all(|t| t.reward.unwrap_or(0.0) == first);
            if uniform {
                dropped += 1;
            } else if self.kept.len() < self.target {
                self.kept.push(members);
            }
        }
        self.dropped += dropped;
        dropped
    }

    /// Enough groups kept?
    pub fn is_full(&self) -> bool {
        self.kept.len() >= self.target
    }

    /// Groups kept so far.
    pub fn kept_groups(&self) -> usize {
        self.kept.len()
    }

    /// Groups dropped so far.
    pub fn dropped_groups(&self) -> usize {
        self.dropped
    }

    /// Rounds added so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The kept trajectories, group by group.
    pub fn into_trajectories(self) -> Vec<Trajectory> {
        self.kept.into_iter().flatten().collect()
    }
}
