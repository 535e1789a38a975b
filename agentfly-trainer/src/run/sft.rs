//! The supervised warm start of `[sft]`: demonstrations tokenized exactly as rollouts
//! tokenize them, epochs of shuffled batches with an AdamW of its own, a line of
//! `sft_metrics.jsonl` per update, and the model after SFT written to `sft-model/`, where it
//! also becomes the reference of the KL.

use super::error::TrainError;
use super::metrics::{MetricsLog, progress_bar};
use super::trainer::{Chains, Trainer};
use crate::train::{OptimConfig, PolicyRow, Schedule, sft_update};
use agentfly_core::data::read_jsonl;
use agentfly_core::rollout::{demonstration, sample_messages};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Where in `output.dir` the policy after `[sft]` is written (Hugging Face layout); the
/// reference of a KL penalty after SFT, and the "after SFT" row of a report.
pub const SFT_MODEL: &str = "sft-model";

/// What the supervised warm start did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftReport {
    /// Demonstrations.
    pub demos: usize,
    /// Updates.
    pub updates: usize,
    /// Mean loss of the first epoch.
    pub first_epoch_loss: f32,
    /// Mean loss of the last epoch.
    pub last_epoch_loss: f32,
    /// Loss of the first batch (one epoch's means alone say nothing of its descent).
    #[serde(default)]
    pub first_batch_loss: f32,
    /// Loss of the last batch.
    #[serde(default)]
    pub last_batch_loss: f32,
    /// Seconds.
    pub seconds: f64,
}

impl Trainer {
    /// The supervised warm start of `[sft]`, once per run (a checkpoint records it; an
    /// interrupted SFT starts over). `None` when there is no `[sft]` or it is done.
    pub fn sft(&mut self) -> Result<Option<SftReport>, TrainError> {
        let Some(sft) = self.config.sft.clone() else {
            return Ok(None);
        };
        if self.sft_done {
            return Ok(None);
        }
        let start = Instant::now();
        let rows = self.demonstration_rows(&sft.data)?;
        // The updates replace the engine's weights (pushed after the last): they need not
        // stay beside them.
        self.chains.generator.release()?;
        let mut optim = OptimConfig {
            lr: sft.lr,
            warmup_steps: 0,
            schedule: Schedule::Constant,
            ..self.config.optim.clone()
        }
        .init();
        let dir = self.output_dir()?.to_path_buf();
        let log = MetricsLog::fresh(dir.join("sft_metrics.jsonl"))?;
        let (mut updates, mut first, mut last) = (0, 0.0f32, 0.0f32);
        let (mut first_batch, mut last_batch) = (None, 0.0f32);
        let batches_per_epoch = rows.len().div_ceil(sft.batch_size.max(1));
        let bar = progress_bar((sft.epochs * batches_per_epoch) as u64, "sft batch");
        for epoch in 0..sft.epochs {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                self.config.train.seed ^ (epoch as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D),
            );
            order.shuffle(&mut rng);
            let (mut total, mut batches) = (0.0f32, 0);
            let batches_before = epoch * batches_per_epoch;
            for (b, chunk) in order.chunks(sft.batch_size).enumerate() {
                let batch: Vec<PolicyRow> = chunk.iter().map(|&i| rows[i].clone()).collect();
                let report = sft_update(
                    &mut self.actor,
                    &batch,
                    sft.micro_batch_tokens,
                    &mut optim,
                    sft.lr,
                );
                updates += report.updates;
                total += report.loss;
                batches += 1;
                first_batch.get_or_insert(report.loss);
                last_batch = report.loss;
                self.log_sft(
                    batches_before + b + 1,
                    report.loss,
                    report.grad_norm,
                    report.tokens,
                )?;
                log.append(&serde_json::json!({
                    "epoch": epoch + 1, "batch": b + 1, "loss": report.loss,
                    "grad_norm": report.grad_norm, "tokens": report.tokens,
                    "skipped": report.skipped,
                }))?;
                bar.set_message(format!("loss {:.4}", report.loss));
                bar.inc(1);
            }
            let mean = total / batches.max(1) as f32;
            if epoch == 0 {
                first = mean;
            }
            last = mean;
        }
        bar.finish_and_clear();
        if let Some(reference) = &mut self.reference {
            // RL's KL is to the warm-started policy, not to the model before SFT.
            reference.decoder = self.actor.snapshot();
        }
        self.sync_policy(self.step as u64)?;
        self.save_model(&dir.join(SFT_MODEL))?;
        self.sft_done = true;
        self.save_checkpoint()?;
        Ok(Some(SftReport {
            demos: rows.len(),
            updates,
            first_epoch_loss: first,
            last_epoch_loss: last,
            first_batch_loss: first_batch.unwrap_or_default(),
            last_batch_loss: last_batch,
            seconds: start.elapsed().as_secs_f64(),
        }))
    }

    /// The demonstrations of `path` as rows: the loss on the assistant's tokens only.
    fn demonstration_rows(&self, path: &std::path::Path) -> Result<Vec<PolicyRow>, TrainError> {
        let demos = read_jsonl(path)?;
        let system = Chains::system_prompt(&self.config)?;
        let tools = (!self.chains.toolbox.is_empty()).then(|| self.chains.toolbox.schemas());
        demos
            .iter()
            .map(|demo| {
                let bad = |message: String| TrainError::Demo {
                    path: path.to_path_buf(),
                    sample: demo.id.clone(),
                    message,
                };
                let messages = sample_messages(demo, &system).map_err(bad)?;
                let (tokens, mask) = demonstration(
                    &self.chains.template,
                    &self.chains.tokenizer,
                    &messages,
                    tools.clone(),
                    self.chains.eos[0],
                )
                .map_err(|e| bad(e.to_string()))?;
                let n = tokens.len();
                Ok(PolicyRow {
                    tokens,
                    mask: mask.into_iter().map(f32::from).collect(),
                    advantages: vec![0.0; n],
                    ..PolicyRow::default()
                })
            })
            .collect()
    }
}
