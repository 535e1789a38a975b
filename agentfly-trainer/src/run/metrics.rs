//! What a run reports: one line of `metrics.jsonl` per step, the console line, the progress
//! bars, and the summary of a finished run.

use super::error::{TrainError, io};
use crate::train::StepReport;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// One step's numbers, one line of `metrics.jsonl`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepMetrics {
    /// The step (1-based).
    pub step: usize,
    /// Trajectories rolled out this step (all rounds).
    pub trajectories: usize,
    /// Their mean reward.
    pub reward_mean: f64,
    /// Their mean `correct` metric, when the reward reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Trajectories trained on (after dynamic sampling).
    pub trained_trajectories: usize,
    /// Groups dropped because their rewards were all equal.
    pub dropped_groups: usize,
    /// Trajectories that got no reward (left out of the update).
    pub reward_failures: usize,
    /// Rollout rounds.
    pub rounds: usize,
    /// Mean advantage over learned tokens.
    pub advantage_mean: f64,
    /// Mean |advantage| over learned tokens.
    pub advantage_abs_mean: f64,
    /// Tool calls.
    pub tool_calls: usize,
    /// Calls that could not be read.
    pub parse_errors: usize,
    /// Mean model turns.
    pub mean_turns: f64,
    /// Tokens the model sampled.
    pub sampled_tokens: usize,
    /// The update.
    #[serde(flatten)]
    pub update: StepReport,
    /// Seconds rolling out.
    pub rollout_seconds: f64,
    /// Seconds updating (log-probs, backward, AdamW).
    pub update_seconds: f64,
    /// Seconds handing the weights to the engine.
    pub sync_seconds: f64,
    /// Seconds the step took, wall clock: rollout, update and sync one after the other,
    /// or (`rollout.overlap`) the update beside the next step's rollout, then the sync.
    pub step_seconds: f64,
    /// Updates between the weights that rolled the batch out and those it updated: 0, or
    /// 1 for a batch rolled out during the previous step's update (`rollout.overlap`).
    pub staleness: usize,
    /// Trajectories not learned from because weights older than that sampled them (with
    /// the rest of their group): a generator that missed a weight update.
    #[serde(default)]
    pub stale_dropped: usize,
    /// What TensorBoard shows beside the numbers (not in `metrics.jsonl`).
    #[serde(skip)]
    pub detail: StepDetail,
}

/// A step's distributions and sample chains, for its TensorBoard events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepDetail {
    /// The rewards of the step's scored trajectories.
    pub rewards: Vec<f64>,
    /// The advantages of the learned tokens.
    pub advantages: Vec<f64>,
    /// The best and the worst rewarded trajectories: which (`best`, `worst`), a title and
    /// the transcript.
    pub samples: Vec<(&'static str, String, String)>,
}

impl StepDetail {
    /// The rewards and sample chains of `all` (the advantages come with the update).
    pub fn of(all: &[agentfly_core::rollout::Trajectory]) -> Self {
        let scored: Vec<_> = all.iter().filter(|t| t.reward.is_some()).collect();
        let by_reward = |a: &&_, b: &&_| {
            let r = |t: &agentfly_core::rollout::Trajectory| t.reward.unwrap_or(0.0);
            r(a).total_cmp(&r(b))
        };
        let best = scored.iter().copied().max_by(by_reward);
        let worst = scored.iter().copied().min_by(by_reward);
        let samples = [("best", best), ("worst", worst)]
            .into_iter()
            .filter_map(|(which, t)| {
                let t = t?;
                let title = format!("{which}: sample `{}` chain {}", t.sample_id, t.chain);
                Some((which, title, t.transcript()))
            })
            .collect();
        Self {
            rewards: scored
                .iter()
                .filter_map(|t| t.reward.map(f64::from))
                .collect(),
            advantages: Vec::new(),
            samples,
        }
    }
}

impl StepMetrics {
    /// The step's console line; `kl_measured`: whether the update measured the KL to
    /// the reference (else it is left out, not shown as 0).
    pub fn line(&self, kl_measured: bool) -> String {
        format!(
            "step {} reward {:.3}{}{}{} clip {:.3} grad {:.3} gap {:.1e} dropped {}{}{} {:.1}s{}",
            self.step,
            self.reward_mean,
            self.accuracy
                .map(|a| format!(" acc {a:.3}"))
                .unwrap_or_default(),
            if self.reward_failures > 0 {
                format!(" unscored {}", self.reward_failures)
            } else {
                String::new()
            },
            if kl_measured {
                format!(" kl {:.4}", self.update.kl)
            } else {
                String::new()
            },
            self.update.clip_fraction,
            self.update.grad_norm,
            self.update.logprob_gap_max,
            self.dropped_groups,
            if self.staleness > 0 {
                format!(
                    " stale {} w {:.3}",
                    self.staleness, self.update.behaviour_weight_mean
                )
            } else {
                String::new()
            },
            if self.stale_dropped > 0 {
                format!(" STALE-DROPPED {}", self.stale_dropped)
            } else {
                String::new()
            },
            self.step_seconds,
            self.update
                .skipped
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default(),
        )
    }
}

/// What a finished `train` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainSummary {
    /// Steps done in all (a resumed run counts the earlier ones).
    pub steps: usize,
    /// The step the run resumed from (0 for a fresh run).
    pub resumed_from: usize,
    /// The last step's mean reward.
    pub last_reward: Option<f64>,
    /// Steps of this run whose update was applied.
    pub updated_steps: usize,
    /// Steps of this run whose update was skipped because something was not finite.
    pub nonfinite_skips: usize,
    /// Trajectories of this run that got no reward.
    pub reward_failures: usize,
    /// Where the final model was written.
    pub model_dir: PathBuf,
}

/// A JSON Lines log of per-step values, each line with a `step`.
#[derive(Debug, Clone)]
pub struct MetricsLog {
    path: PathBuf,
}

impl MetricsLog {
    /// The log at `path` (kept as it is).
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// A new, empty log at `path` (an earlier one is emptied).
    pub fn fresh(path: PathBuf) -> Result<Self, TrainError> {
        std::fs::File::create(&path).map_err(io(&path))?;
        Ok(Self { path })
    }

    /// Drops lines past `step` (a resumed run redoes those steps).
    pub fn keep_until(&self, step: usize) -> Result<(), TrainError> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Ok(());
        };
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| v["step"].as_u64())
                    .is_some_and(|s| s as usize <= step)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        super::checkpoint::write_atomic(&self.path, &kept).map_err(io(&self.path))
    }

    /// Appends one line.
    pub fn append(&self, value: &impl Serialize) -> Result<(), TrainError> {
        let line = serde_json::to_string(value).map_err(io(&self.path))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        writeln!(file, "{line}").map_err(io(&self.path))
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A bar of `len` units named `unit`, with time left and a message.
pub fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:30}}] {unit} {{pos}}/{{len}} ({{eta}} left) {{msg}}"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    )
}

/// Prints `line` above `bar`, or on stderr when the bar is hidden (not a terminal).
pub fn print_line(bar: &ProgressBar, line: &str) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}
