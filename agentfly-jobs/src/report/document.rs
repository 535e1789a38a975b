//! [`Report`]: `REPORT.md` in a job's `report/` directory, written section by section, with
//! its charts beside it.

use super::held_out::{self, Comparison, Eval};
use super::training::{TrainingCurves, step_seconds};
use super::trajectories::SampleTrajectories;
use crate::JobError;
use crate::evaluation::ValPoint;
use crate::run_dir::write;
use agentfly_trainer::run::{SftReport, StepMetrics};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A report being written.
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    md: String,
}

impl Report {
    /// A report in `dir` (created) titled `title`, made by `command`.
    pub fn new(dir: &Path, title: &str, command: &str) -> Result<Self, JobError> {
        std::fs::create_dir_all(dir).map_err(JobError::io(dir))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            md: format!("# {title}\n\nMade by `{command}`.\n\n"),
        })
    }

    /// A paragraph of the job's own (its set-up, say).
    pub fn paragraph(&mut self, text: &str) {
        self.md += text.trim_end();
        self.md += "\n\n";
    }

    /// The held-out section: the table, `notes` (one line each), the verdict of each
    /// comparison (paired over the evaluated `items`, e.g. `games`), and the accuracy chart
    /// titled `chart_title`.
    pub fn held_out(
        &mut self,
        evals: &[Eval],
        notes: &[String],
        comparisons: &[Comparison<'_>],
        items: &str,
        chart_title: &str,
    ) -> Result<(), JobError> {
        self.md += "## Held-out test accuracy\n\n";
        self.md += &held_out::table(evals);
        self.md.push('\n');
        for note in notes {
            let _ = writeln!(self.md, "- {note}");
        }
        self.md += &held_out::verdicts(evals, comparisons, items);
        self.md.push('\n');
        if !evals.is_empty() {
            held_out::chart(&self.dir.join("accuracy.png"), chart_title, evals)?;
            self.md += "![test accuracy with 95% intervals](accuracy.png)\n\n";
        }
        Ok(())
    }

    /// The training section (nothing before the first RL step).
    pub fn training(&mut self, curves: &TrainingCurves<'_>) -> Result<(), JobError> {
        self.md += &curves.write(&self.dir)?;
        Ok(())
    }

    /// The supervised warm start's line.
    pub fn sft(&mut self, sft: &SftReport) {
        let _ = writeln!(
            self.md,
            "SFT: {} demonstrations, {} updates, loss {:.4} (first batch) → {:.4} (last batch), \
             mean loss {:.4} (first epoch) → {:.4} (last), {:.0} s.\n",
            sft.demos,
            sft.updates,
            sft.first_batch_loss,
            sft.last_batch_loss,
            sft.first_epoch_loss,
            sft.last_epoch_loss,
            sft.seconds
        );
    }

    /// Sample trajectories before and after training.
    pub fn sample_trajectories(&mut self, evals: &[Eval], which: &SampleTrajectories<'_>) {
        self.md += &which.markdown(evals);
    }

    /// Where the time went (model loading not counted).
    pub fn times(
        &mut self,
        evals: &[Eval],
        sft: Option<&SftReport>,
        metrics: &[StepMetrics],
        validation: &[ValPoint],
    ) {
        let val_s: f64 = validation.iter().map(|p| p.seconds).sum();
        let eval_s: f64 = evals.iter().map(|e| e.report.summary.wall_seconds).sum();
        let sft_s = sft.map_or(0.0, |s| s.seconds);
        let rl_s: f64 = metrics.iter().map(step_seconds).sum();
        let _ = writeln!(
            self.md,
            "## Time\n\nTest evaluations {:.0} s, SFT {:.0} s, RL {:.0} s ({} steps), validation \
             {:.0} s: {:.1} minutes in all (model loading not counted).\n",
            eval_s,
            sft_s,
            rl_s,
            metrics.len(),
            val_s,
            (eval_s + sft_s + rl_s + val_s) / 60.0
        );
    }

    /// The files of a trainer run (`out/`) and the job's own `extra` lines.
    pub fn files(&mut self, extra: &[&str]) {
        self.md += "## Files\n\n\
            - `out/model/`: the trained policy in Hugging Face layout (config.json, \
            model.safetensors, tokenizer) — transformers loads it.\n\
            - `out/sft-model/`: the policy after SFT.\n\
            - `out/checkpoints/`: the latest checkpoints (rerun the command to resume).\n\
            - `out/metrics.jsonl`, `out/sft_metrics.jsonl`, `val.jsonl`: per-step metrics.\n\
            - `evals/*.json`: every test evaluation with its trajectories.\n\
            - `run.toml`: the trainer's configuration (`agentfly train --config`, `agentfly eval --config`).\n";
        for line in extra {
            let _ = writeln!(self.md, "- {line}");
        }
    }

    /// Writes `REPORT.md`; returns its path.
    pub fn write(self) -> Result<PathBuf, JobError> {
        let path = self.dir.join("REPORT.md");
        write(&path, &self.md)?;
        Ok(path)
    }
}
