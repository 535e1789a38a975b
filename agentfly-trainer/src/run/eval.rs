//! Held-out evaluation's numbers: accuracy with its 95% Wilson interval, tool-call and
//! parse-error rates, mean turns; and what counts as a solved sample.

use agentfly_core::rollout::{ChainEnd, RolloutSummary, Trajectory};
use serde::{Deserialize, Serialize};

/// `[eval]`: what a held-out evaluation tolerates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalSection {
    /// The share of samples whose chain may fail ([`failed_of`]: a server or environment
    /// lost, a reward that errored) after the retries; past it the evaluation is an error
    /// (so no job caches it), not a lower accuracy.
    pub max_failures: f64,
    /// Times the failed samples are rolled out again before they count as failed.
    pub retries: usize,
}

impl Default for EvalSection {
    fn default() -> Self {
        Self {
            max_failures: 0.02,
            retries: 2,
        }
    }
}

/// Accuracy on a set of samples, with its 95% (Wilson) interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Samples evaluated.
    pub samples: usize,
    /// Correct ones (reward metric `correct`, else reward > 0), among those that did not
    /// fail.
    pub correct: usize,
    /// Samples whose chain failed rather than answered: the policy or its server failed,
    /// the environment was lost, or the reward could not be computed ([`failed_of`]).
    /// They count in `samples` and not in `correct`; an evaluation with more than
    /// `eval.max_failures` of them is an error, not a result.
    #[serde(default)]
    pub failed: usize,
    /// Why the first failed chain failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// `correct / samples`.
    pub accuracy: f64,
    /// The 95% Wilson score interval of the accuracy.
    pub interval: (f64, f64),
    /// Mean reward.
    pub reward_mean: f64,
    /// Share of trajectories with at least one tool call.
    pub tool_call_rate: f64,
    /// Unreadable calls per trajectory.
    pub parse_error_rate: f64,
    /// Mean turns.
    pub mean_turns: f64,
    /// The rollout's summary.
    pub summary: RolloutSummary,
    /// The trajectories (greedy, one per sample).
    #[serde(default)]
    pub trajectories: Vec<Trajectory>,
}

impl EvalReport {
    /// The report of one trajectory per sample.
    pub fn of(trajectories: Vec<Trajectory>, summary: RolloutSummary) -> Self {
        let n = trajectories.len();
        let correct = trajectories
            .iter()
            .filter(|t| !failed_of(t) && correct_of(t))
            .count();
        let failed = trajectories.iter().filter(|t| failed_of(t)).count();
        let first_failure = trajectories.iter().find_map(failure_of);
        let with_calls = trajectories
            .iter()
            .filter(|t| t.calls().next().is_some())
            .count();
        let rate = |x: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        Self {
            samples: n,
            correct,
            failed,
            first_failure,
            accuracy: rate(correct),
            interval: wilson_interval(correct, n),
            reward_mean: summary.reward_mean.unwrap_or(0.0),
            tool_call_rate: rate(with_calls),
            parse_error_rate: rate(summary.parse_errors),
            mean_turns: summary.mean_turns,
            summary,
            trajectories,
        }
    }
}

impl EvalReport {
    /// The failed chains, counted from the trajectories when the report has them (a report
    /// written before failures were counted apart says 0).
    pub fn failures(&self) -> usize {
        if self.trajectories.is_empty() {
            self.failed
        } else {
            self.trajectories.iter().filter(|t| failed_of(t)).count()
        }
    }
}

/// Did the chain fail rather than answer? It ended in an error (the policy or its server
/// failed, the environment was lost) or got no reward (the reward failed). A wrong answer
/// is not a failure.
pub fn failed_of(t: &Trajectory) -> bool {
    t.finish_reason == ChainEnd::Error || t.reward.is_none()
}

/// Why `t` failed, when it did.
pub fn failure_of(t: &Trajectory) -> Option<String> {
    if !failed_of(t) {
        return None;
    }
    let why = t
        .error
        .clone()
        .or_else(|| t.reward_error.clone())
        .unwrap_or_else(|| "no reward".to_string());
    Some(format!("sample {}: {why}", t.sample_id))
}

/// Was the task solved? The reward's `correct` metric, else the unshaped reward
/// (`task_reward`) or the reward being positive.
pub fn correct_of(t: &Trajectory) -> bool {
    match t.reward_metrics.get("correct") {
        Some(c) => *c > 0.5,
        None => match t.reward_metrics.get("task_reward") {
            Some(r) => *r > 0.0,
            None => t.reward.is_some_and(|r| r > 0.0),
        },
    }
}

/// The share of solved trajectories, when the reward reports `correct`.
pub fn accuracy_of(trajectories: &[Trajectory]) -> Option<f64> {
    trajectories
        .iter()
        .any(|t| t.reward_metrics.contains_key("correct"))
        .then(|| {
            trajectories.iter().filter(|t| correct_of(t)).count() as f64
                / trajectories.len().max(1) as f64
        })
}

/// The 95% Wilson score interval of `k` successes in `n`.
pub fn wilson_interval(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    // At 0 or n successes a bound is exactly 0 or 1 (the formula leaves rounding noise).
    let low = if k == 0.0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if k == n {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::wilson_interval;

    #[test]
    fn wilson_intervals_match_the_formula() {
        let close = |(a, b): (f64, f64), (c, d): (f64, f64)| {
            assert!(
                (a - c).abs() < 1e-9 && (b - d).abs() < 1e-9,
                "{a} {b} vs {c} {d}"
            );
        };
        close(
            wilson_interval(6, 48),
            (0.058_570_514_385_719_79, 0.247_004_582_863_868_34),
        );
        close(
            wilson_interval(28, 48),
            (0.442_813_322_839_762_8, 0.711_503_322_215_884_4),
        );
        close(wilson_interval(0, 48), (0.0, 0.074_100_129_667_617_48));
        close(wilson_interval(48, 48), (0.925_899_870_333_882_4, 1.0));
        assert_eq!(wilson_interval(0, 0), (0.0, 1.0));
    }
}
