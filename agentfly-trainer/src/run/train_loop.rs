//! The loop: SFT when configured, then the remaining RL steps, each followed by its line of
//! `metrics.jsonl`, its console line, a checkpoint every `checkpoint_every` steps and the
//! caller's hook; the final model at the end.

use super::error::TrainError;
use super::metrics::{MetricsLog, StepMetrics, TrainSummary, print_line, progress_bar};
use super::trainer::Trainer;
use indicatif::ProgressBar;

impl Trainer {
    /// Runs the remaining steps: metrics to `output.dir/metrics.jsonl`, a progress line,
    /// checkpoints every `checkpoint_every` steps and at the end, the final model in
    /// `output.dir/model`.
    pub fn train(&mut self) -> Result<TrainSummary, TrainError> {
        self.train_with(|_, _, _| Ok(()))
    }

    /// [`Trainer::train`], calling `after_step` after each step's metrics and checkpoint
    /// are written (e.g. to evaluate on the validation split); it may set the progress
    /// bar's message.
    pub fn train_with(
        &mut self,
        mut after_step: impl FnMut(
            &Self,
            &StepMetrics,
            &ProgressBar,
        ) -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
    ) -> Result<TrainSummary, TrainError> {
        let dir = self.output_dir()?.to_path_buf();
        if let Some(report) = self.sft()? {
            eprintln!(
                "sft: {} demonstrations, {} updates, loss {:.4} -> {:.4} (first and last batch; \
                 epoch means {:.4} -> {:.4}) ({:.1}s)",
                report.demos,
                report.updates,
                report.first_batch_loss,
                report.last_batch_loss,
                report.first_epoch_loss,
                report.last_epoch_loss,
                report.seconds
            );
        }
        let log = MetricsLog::new(dir.join("metrics.jsonl"));
        log.keep_until(self.step)?;
        // Opened before the first step, so that its restart marker drops what an
        // interrupted run wrote past the checkpoint this one resumed from.
        self.on_board(super::board::Board::Rl, |_| Ok(()))?;
        let total = self.config.train.steps;
        let bar = progress_bar(total as u64, "step");
        bar.set_position(self.step as u64);
        let mut last_reward = None;
        let (mut steps, mut updated_steps, mut nonfinite_skips, mut reward_failures) = (0, 0, 0, 0);
        let mut last_skip = None;
        let mut run = || -> Result<(), TrainError> {
            while self.step < total {
                let engine_before = self.chains.generator.engine_stats();
                let m = self.train_step()?;
                let engine = engine_before.zip(self.chains.generator.engine_stats());
                self.log_step(&m, engine)?;
                last_reward = Some(m.reward_mean);
                steps += 1;
                reward_failures += m.reward_failures;
                if m.update.updates > 0 {
                    updated_steps += 1;
                } else if let Some(reason) = m.update.skipped.as_deref()
                    && reason.contains("non-finite")
                {
                    nonfinite_skips += 1;
                    last_skip = Some(reason.to_string());
                }
                log.append(&m)?;
                print_line(&bar, &m.line(self.config.train.measures_kl()));
                bar.set_message(format!("reward {:.3}", m.reward_mean));
                bar.set_position(self.step as u64);
                let every = self.config.output.checkpoint_every.max(1);
                if self.step.is_multiple_of(every) || self.step == total {
                    // Written while the next step rolls out (and `after_step` runs).
                    self.save_checkpoint_in_background()?;
                }
                after_step(self, &m, &bar).map_err(TrainError::AfterStep)?;
            }
            Ok(())
        };
        let ran = run();
        bar.finish_and_clear();
        // However the steps ended, the last checkpoint is complete before this returns.
        let written = self.finish_writing();
        ran?;
        written?;
        if steps > 0 && nonfinite_skips == steps {
            return Err(TrainError::NoUpdate {
                steps,
                reason: last_skip.unwrap_or_default(),
            });
        }
        let model_dir = dir.join("model");
        self.save_model(&model_dir)?;
        Ok(TrainSummary {
            steps: self.step,
            resumed_from: self.resumed_from,
            last_reward,
            updated_steps,
            nonfinite_skips,
            reward_failures,
            model_dir,
        })
    }
}
