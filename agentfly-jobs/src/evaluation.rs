//! Held-out evaluation inside a job: greedy evaluations with a progress bar, and the
//! validation points taken during RL (written as JSON Lines, one per evaluated step).

use crate::JobError;
use agentfly_core::Sample;
use agentfly_trainer::run::{EvalReport, Trainer};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

/// Greedy evaluation of `trainer`'s policy on `samples`, with a progress bar named `label`.
pub fn evaluate(
    trainer: &Trainer,
    samples: &[Sample],
    label: &str,
) -> Result<EvalReport, JobError> {
    let bar = ProgressBar::new(samples.len() as u64).with_style(
        ProgressStyle::with_template("    {prefix} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    let report = trainer.evaluate_with(samples, |_| bar.inc(1))?;
    bar.finish_and_clear();
    Ok(report)
}

/// The line a job prints for an evaluation of the test split.
pub fn summary_line(key: &str, report: &EvalReport) -> String {
    format!(
        "    {key}: {}/{} correct = {:.3} (95% CI {:.3}-{:.3}), {} failed, tool calls in {:.0}% of answers",
        report.correct,
        report.samples,
        report.accuracy,
        report.interval.0,
        report.interval.1,
        report.failures(),
        report.tool_call_rate * 100.0
    )
}

/// Validation accuracy after an RL step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValPoint {
    /// The step.
    pub step: usize,
    /// Samples solved.
    pub correct: usize,
    /// Samples.
    pub samples: usize,
    /// Their share.
    pub accuracy: f64,
    /// The 95% interval.
    pub interval: (f64, f64),
    /// Seconds the evaluation took.
    #[serde(default)]
    pub seconds: f64,
}

impl ValPoint {
    /// Writes the point into the trainer's TensorBoard events (`validation/`).
    pub fn log_to(&self, trainer: &Trainer) -> Result<(), JobError> {
        Ok(trainer.log_scalars(
            self.step,
            &[
                ("validation/accuracy", self.accuracy),
                ("validation/correct", self.correct as f64),
                ("validation/interval_low", self.interval.0),
                ("validation/interval_high", self.interval.1),
            ],
        )?)
    }

    /// The line printed after the evaluation.
    pub fn line(&self) -> String {
        format!(
            "validation after step {}: {}/{} = {:.3} (95% CI {:.3}-{:.3})",
            self.step, self.correct, self.samples, self.accuracy, self.interval.0, self.interval.1
        )
    }
}

/// Greedy accuracy on the validation split after `step`; progress in `bar`'s message.
pub fn validate(
    trainer: &Trainer,
    val: &[Sample],
    step: usize,
    bar: Option<&ProgressBar>,
) -> Result<ValPoint, JobError> {
    let mut done = 0;
    let report = trainer.evaluate_with(val, |_| {
        done += 1;
        if let Some(bar) = bar {
            bar.set_message(format!("validation {done}/{}", val.len()));
        }
    })?;
    Ok(ValPoint {
        step,
        correct: report.correct,
        samples: report.samples,
        accuracy: report.accuracy,
        interval: report.interval,
        seconds: report.summary.wall_seconds,
    })
}
