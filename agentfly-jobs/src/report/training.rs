//! The RL run's curves and per-step table: reward on training rollouts with validation
//! accuracy (95% intervals), KL to the reference (when tracked) and entropy, tool use and
//! parse errors, groups kept and dropped by dynamic sampling.

use super::plots::{self, Panel, Proportion, Series};
use crate::JobError;
use crate::evaluation::ValPoint;
use agentfly_trainer::run::StepMetrics;
use std::fmt::Write as _;
use std::path::Path;

/// What the training section shows.
#[derive(Debug, Clone, Copy)]
pub struct TrainingCurves<'a> {
    /// The RL steps' metrics (`metrics.jsonl`).
    pub metrics: &'a [StepMetrics],
    /// Validation accuracy after some steps.
    pub validation: &'a [ValPoint],
    /// Validation samples.
    pub validation_size: usize,
    /// Chains per sample (a group).
    pub chains: usize,
    /// The largest reward a chain can get (1 plus any shaping bonus).
    pub reward_top: f64,
    /// Whether the reward is shaped (then task accuracy is drawn beside it).
    pub shaped: bool,
    /// Whether the updates measured the KL to the reference (a run with a KL penalty);
    /// without, the KL is left out rather than drawn as zeros.
    pub kl_tracked: bool,
}

impl TrainingCurves<'_> {
    /// Draws `training.png` and `behaviour.png` into `dir` and returns the section's
    /// Markdown (nothing when there are no steps).
    pub fn write(&self, dir: &Path) -> Result<String, JobError> {
        let metrics = self.metrics;
        if metrics.is_empty() {
            return Ok(String::new());
        }
        let line = |name: &str, f: &dyn Fn(&StepMetrics) -> f64| Series {
            name: name.into(),
            points: metrics.iter().map(|m| (m.step as f64, f(m))).collect(),
        };
        let mut reward = vec![line("mean reward", &|m| m.reward_mean)];
        if self.shaped
            || metrics
                .iter()
                .any(|m| m.accuracy.is_some_and(|a| (a - m.reward_mean).abs() > 1e-9))
        {
            reward.push(line("task accuracy", &|m| m.accuracy.unwrap_or(0.0)));
        }
        let groups = |m: &StepMetrics| (m.trained_trajectories / self.chains.max(1)) as f64;
        let kl_tracked = self.kl_tracked();
        plots::figure(
            &dir.join("training.png"),
            &[
                Panel {
                    title: "reward on training rollouts; validation accuracy".into(),
                    x_label: "RL step".into(),
                    y_label: "reward / accuracy".into(),
                    y_range: Some((0.0, self.reward_top)),
                    series: reward,
                    intervals: self
                        .validation
                        .iter()
                        .map(|p| {
                            (
                                p.step as f64,
                                Proportion {
                                    label: "validation accuracy (95% CI)".into(),
                                    value: p.accuracy,
                                    interval: p.interval,
                                },
                            )
                        })
                        .collect(),
                },
                Panel {
                    title: if kl_tracked {
                        "KL to the reference; entropy"
                    } else {
                        "entropy (KL to the reference not tracked)"
                    }
                    .into(),
                    x_label: "RL step".into(),
                    y_label: "nats per token".into(),
                    y_range: None,
                    series: [
                        kl_tracked.then(|| line("KL (k3)", &|m| f64::from(m.update.kl))),
                        Some(line("entropy", &|m| f64::from(m.update.entropy))),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                    intervals: vec![],
                },
            ],
        )?;
        plots::figure(
            &dir.join("behaviour.png"),
            &[
                Panel {
                    title: "tool use on training rollouts".into(),
                    x_label: "RL step".into(),
                    y_label: "per trajectory".into(),
                    y_range: None,
                    series: vec![
                        line("tool calls", &|m| per(m.tool_calls, m)),
                        line("parse errors", &|m| per(m.parse_errors, m)),
                        line("model turns", &|m| m.mean_turns),
                    ],
                    intervals: vec![],
                },
                Panel {
                    title: "groups kept for the update".into(),
                    x_label: "RL step".into(),
                    y_label: "groups".into(),
                    y_range: None,
                    series: vec![
                        line("kept", &groups),
                        line("dropped (equal rewards)", &|m| m.dropped_groups as f64),
                    ],
                    intervals: vec![],
                },
            ],
        )?;
        let mut md = String::from("## Training\n\n");
        md += "![reward, validation accuracy, KL](training.png)\n\n";
        md += "![tool calls, parse errors, turns](behaviour.png)\n\n";
        if !self.validation.is_empty() {
            let _ = writeln!(
                md,
                "Validation accuracy ({} samples, greedy): {}.\n",
                self.validation_size,
                self.validation
                    .iter()
                    .map(|p| format!(
                        "step {} {}/{} ({:.3}–{:.3})",
                        p.step, p.correct, p.samples, p.interval.0, p.interval.1
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        md += &self.table();
        Ok(md)
    }

    /// Whether to show the KL: tracked, or found in metrics written when every run
    /// tracked it.
    fn kl_tracked(&self) -> bool {
        self.kl_tracked || self.metrics.iter().any(|m| m.update.kl != 0.0)
    }

    /// One row per step.
    fn table(&self) -> String {
        let mut md = String::from(
            "| step | mean reward | accuracy | groups kept / dropped | KL | entropy | clipped | grad norm | calls per trajectory | parse errors | turns | rollout s | update s | step s | stale |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let kl_tracked = self.kl_tracked();
        for m in self.metrics {
            let _ = writeln!(
                md,
                "| {} | {:.3} | {} | {} / {} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {} |",
                m.step,
                m.reward_mean,
                m.accuracy.map_or("-".into(), |a| format!("{a:.3}")),
                m.trained_trajectories / self.chains.max(1),
                m.dropped_groups,
                if kl_tracked {
                    format!("{:.4}", m.update.kl)
                } else {
                    "-".into()
                },
                m.update.entropy,
                m.update.clip_fraction,
                m.update.grad_norm,
                per(m.tool_calls, m),
                per(m.parse_errors, m),
                m.mean_turns,
                m.rollout_seconds,
                m.update_seconds,
                step_seconds(m),
                m.staleness
            );
        }
        md.push('\n');
        md
    }
}

/// A count per trajectory of the step.
fn per(x: usize, m: &StepMetrics) -> f64 {
    x as f64 / m.trajectories.max(1) as f64
}

/// A step's wall time: as measured, or (metrics written before steps were timed whole)
/// its parts' sum.
pub(crate) fn step_seconds(m: &StepMetrics) -> f64 {
    if m.step_seconds > 0.0 {
        m.step_seconds
    } else {
        m.rollout_seconds + m.update_seconds + m.sync_seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curves(metrics: &[StepMetrics], kl_tracked: bool) -> TrainingCurves<'_> {
        TrainingCurves {
            metrics,
            validation: &[],
            validation_size: 0,
            chains: 8,
            reward_top: 1.0,
            shaped: false,
            kl_tracked,
        }
    }

    #[test]
    fn an_untracked_kl_is_shown_as_missing_not_as_zero() {
        let mut metrics = vec![StepMetrics::default(); 2];
        metrics[0].step = 1;
        metrics[1].step = 2;
        let kl_column = |table: String| -> Vec<String> {
            table
                .lines()
                .skip(2)
                .filter(|l| !l.is_empty())
                .map(|l| l.split('|').nth(5).unwrap().trim().to_string())
                .collect()
        };
        assert_eq!(kl_column(curves(&metrics, false).table()), ["-", "-"]);
        assert_eq!(
            kl_column(curves(&metrics, true).table()),
            ["0.0000", "0.0000"]
        );
        // Metrics from a run that measured it are shown whatever the settings say.
        metrics[1].update.kl = 0.0123;
        assert_eq!(
            kl_column(curves(&metrics, false).table()),
            ["0.0000", "0.0123"]
        );
    }
}
