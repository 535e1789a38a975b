//! The run's TensorBoard events (`output.tensorboard`): in `<output>/tensorboard/`, each RL
//! step's numbers (the fields of its `metrics.jsonl` line, grouped as `rollout/`, `update/`
//! and `time/`), the engine's batching over the step (`engine/`), histograms of its rewards
//! and advantages, the transcripts of its best and worst chains, and what the caller adds
//! ([`Trainer::log_scalars`]: the jobs' validation accuracy); in
//! `<output>/tensorboard/sft/`, SFT's loss per batch (a run of its own in TensorBoard, so
//! that RL's steps and SFT's batches do not share an axis).
//!
//! A writer is opened on first use and starts its file with a `SessionLog START` at the step
//! it writes next, so that TensorBoard drops what an interrupted run wrote past the
//! checkpoint this one resumed from.

use super::error::{TrainError, io};
use super::metrics::StepMetrics;
use super::trainer::Trainer;
use crate::sync::lock;
use crate::tensorboard::EventWriter;

use agentfly_engine::engine::EngineStats;
use serde_json::Value;

/// The directory of the run's events, under its output directory.
pub const TENSORBOARD_DIR: &str = "tensorboard";

/// Which of the run's event files.
#[derive(Debug, Clone, Copy)]
pub(super) enum Board {
    /// RL's steps and the caller's values.
    Rl,
    /// SFT's batches.
    Sft,
}

/// Each number of `m`'s `metrics.jsonl` line as a tagged scalar.
fn step_scalars(m: &StepMetrics) -> Vec<(String, f64)> {
    let update: Vec<String> = match serde_json::to_value(&m.update) {
        Ok(Value::Object(fields)) => fields.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let Ok(Value::Object(fields)) = serde_json::to_value(m) else {
        return Vec::new();
    };
    fields
        .iter()
        .filter(|(key, _)| *key != "step")
        .filter_map(|(key, value)| {
            let group = if update.contains(key) {
                "update"
            } else if key.ends_with("_seconds") {
                "time"
            } else {
                "rollout"
            };
            Some((format!("{group}/{key}"), value.as_f64()?))
        })
        .collect()
}

/// The engine's work between two snapshots: its mean batches, tokens and seconds.
fn engine_scalars(before: &EngineStats, after: &EngineStats) -> Vec<(String, f64)> {
    let per = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let d = |f: fn(&EngineStats) -> f64| f(after) - f(before);
    let steps = d(|s| s.steps as f64);
    [
        ("mean_batch", per(d(|s| s.rows as f64), steps)),
        (
            "mean_batch_over_time",
            per(d(|s| s.row_seconds), d(|s| s.decode_seconds)),
        ),
        ("mean_waiting", per(d(|s| s.waiting_rows as f64), steps)),
        ("requests", d(|s| s.requests as f64)),
        ("prefill_tokens", d(|s| s.prefill_tokens as f64)),
        ("prefix_reused_tokens", d(|s| s.prefix_reused_tokens as f64)),
        ("generated_tokens", d(|s| s.generated_tokens as f64)),
        ("prefill_seconds", d(|s| s.prefill_seconds)),
        ("decode_seconds", d(|s| s.decode_seconds)),
    ]
    .into_iter()
    .map(|(k, v)| (format!("engine/{k}"), v))
    .collect()
}

impl Trainer {
    /// Runs `f` on the event file `board`; nothing when the run writes none. Opened on first
    /// use, it starts at the step after the last one done (RL), or at SFT's first batch (an
    /// interrupted SFT starts over).
    pub(super) fn on_board(
        &self,
        board: Board,
        f: impl FnOnce(&mut EventWriter) -> std::io::Result<()>,
    ) -> Result<(), TrainError> {
        if !self.config.output.tensorboard {
            return Ok(());
        }
        let root = self.tensorboard_dir()?;
        let (dir, start) = match board {
            Board::Rl => (root, self.step as u64 + 1),
            Board::Sft => (root.join("sft"), 1),
        };
        lock(&self.boards).with(&dir, start, f).map_err(io(&dir))
    }

    /// Writes `scalars` (tag, value) at RL step `step` into the run's TensorBoard events
    /// (e.g. `validation/accuracy`); nothing when `output.tensorboard` is off.
    pub fn log_scalars(&self, step: usize, scalars: &[(&str, f64)]) -> Result<(), TrainError> {
        self.on_board(Board::Rl, |w| w.scalars(step as u64, scalars))
    }

    /// A step's events: its numbers, the engine's work over it (`engine`: the engine's
    /// counters before and after), its distributions and sample chains.
    pub(super) fn log_step(
        &self,
        m: &StepMetrics,
        engine: Option<(EngineStats, EngineStats)>,
    ) -> Result<(), TrainError> {
        let step = m.step as u64;
        self.on_board(Board::Rl, |w| {
            let mut scalars = step_scalars(m);
            if let Some((before, after)) = &engine {
                scalars.extend(engine_scalars(before, after));
            }
            w.scalars(step, &scalars)?;
            w.histogram("rollout/rewards", step, &m.detail.rewards)?;
            w.histogram("update/advantages", step, &m.detail.advantages)?;
            for (which, title, transcript) in &m.detail.samples {
                let text = format!("{title}\n\n```text\n{transcript}```");
                w.text(&format!("samples/{which}"), step, &text)?;
            }
            Ok(())
        })
    }

    /// SFT batch `batch`'s (1-based over all epochs) loss, gradient norm and tokens.
    pub(super) fn log_sft(
        &self,
        batch: usize,
        loss: f32,
        grad_norm: f32,
        tokens: usize,
    ) -> Result<(), TrainError> {
        let values = [
            ("sft/loss", f64::from(loss)),
            ("sft/grad_norm", f64::from(grad_norm)),
            ("sft/tokens", tokens as f64),
        ];
        self.on_board(Board::Sft, |w| w.scalars(batch as u64, &values))
    }

    /// Where the run's events are (whether or not any was written yet).
    pub fn tensorboard_dir(&self) -> Result<std::path::PathBuf, TrainError> {
        Ok(self.output_dir()?.join(TENSORBOARD_DIR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_of_a_step_is_a_tagged_scalar() {
        let mut m = StepMetrics {
            step: 3,
            reward_mean: 0.5,
            accuracy: Some(0.25),
            rollout_seconds: 2.0,
            ..StepMetrics::default()
        };
        m.update.kl = 0.125;
        let scalars = step_scalars(&m);
        let get = |tag: &str| scalars.iter().find(|(t, _)| t == tag).map(|(_, v)| *v);
        assert_eq!(get("rollout/reward_mean"), Some(0.5));
        assert_eq!(get("rollout/accuracy"), Some(0.25));
        assert_eq!(get("update/kl"), Some(0.125));
        assert_eq!(get("time/rollout_seconds"), Some(2.0));
        assert_eq!(get("update/update_seconds"), None);
        assert!(get("time/update_seconds").is_some());
        assert!(scalars.iter().all(|(t, _)| !t.ends_with("/step")));
    }

    #[test]
    fn the_engines_work_is_the_difference_of_its_counters() {
        let before = EngineStats {
            steps: 10,
            rows: 40,
            generated_tokens: 100,
            ..EngineStats::default()
        };
        let after = EngineStats {
            steps: 30,
            rows: 200,
            generated_tokens: 260,
            ..EngineStats::default()
        };
        let scalars = engine_scalars(&before, &after);
        let get = |tag: &str| scalars.iter().find(|(t, _)| t == tag).map(|(_, v)| *v);
        assert_eq!(get("engine/mean_batch"), Some(8.0));
        assert_eq!(get("engine/generated_tokens"), Some(160.0));
        assert_eq!(get("engine/mean_batch_over_time"), Some(0.0));
    }
}
