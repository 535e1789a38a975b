//! Writing a run out: the policy in Hugging Face layout, and checkpoints (policy, optimizer,
//! critic, configuration, position), each committed atomically through `checkpoint`.

use super::batch::PENDING_FILE;
use super::checkpoint::{self, RunState};
use super::error::{TrainError, io};
use super::trainer::Trainer;
use crate::Pretrained;
use crate::model::Rope;
use std::path::{Path, PathBuf};

/// Where a checkpoint or a saved model keeps the adapters alone (PEFT's layout), when the
/// run trains adapters (`[lora]`); the model beside it has them merged.
pub const ADAPTER_DIR: &str = "adapter";

impl Trainer {
    /// Writes the adapters alone into `dir/adapter` in PEFT's layout (nothing without
    /// `[lora]`).
    fn write_adapter(&self, dir: &Path) -> Result<(), crate::ModelError> {
        let Some(lora) = &self.config.lora else {
            return Ok(());
        };
        crate::model::save_adapter(
            self.actor.decoder(),
            &self.model_config,
            lora,
            &self.config.model.path.to_string_lossy(),
            &dir.join(ADAPTER_DIR),
        )
    }

    /// The policy as a loadable model (weights without autodiff).
    fn pretrained(&self) -> Pretrained {
        Pretrained {
            config: self.model_config.clone(),
            decoder: self.actor.snapshot(),
            rope: Rope::for_config(&self.model_config, &self.device),
            tokenizer: Some(self.chains.tokenizer.clone()),
            tokenizer_config: self.tokenizer_config.clone(),
            source: self.config.model.path.clone(),
        }
    }

    /// Writes the policy in Hugging Face layout (transformers loads it), atomically.
    pub fn save_model(&self, dir: &Path) -> Result<(), TrainError> {
        let model = self.pretrained();
        let mut failure = None;
        checkpoint::replace_dir(dir, |tmp| {
            model
                .save(tmp)
                .and_then(|()| self.write_adapter(tmp))
                .map_err(|e| {
                    failure = Some(TrainError::Model(e));
                    std::io::Error::other("model")
                })
        })
        .map_err(|e| failure.take().unwrap_or_else(|| io(dir)(e)))
    }

    /// Writes a checkpoint of this step (policy, optimizer, position, the batch rolled out
    /// for the next step when there is one) atomically.
    pub fn save_checkpoint(&self) -> Result<PathBuf, TrainError> {
        let root = self.config.output.dir.join("checkpoints");
        let final_dir = checkpoint::step_dir(&root, self.step);
        let state = RunState {
            step: self.step,
            cursor: self.sampler.cursor,
            sft_done: self.sft_done,
            param_ids: checkpoint::param_ids(self.actor.decoder()),
        };
        let model = self.pretrained();
        let mut failure = None;
        checkpoint::commit(
            &root,
            &final_dir,
            self.config.output.keep_checkpoints,
            |tmp| {
                if let Err(e) = model
                    .save(&tmp.join("model"))
                    .and_then(|()| self.write_adapter(tmp))
                {
                    failure = Some(TrainError::Model(e));
                    return Err(std::io::Error::other("model"));
                }
                self.actor
                    .optimizer()
                    .save(tmp.join("optimizer.bpk"))
                    .map_err(|e| std::io::Error::other(format!("optimizer state: {e:?}")))?;
                if let Some(critic) = &self.critic {
                    checkpoint::save_critic(tmp, critic).map_err(std::io::Error::other)?;
                }
                if let Some(batch) = &self.pending {
                    let json = serde_json::to_string(batch).map_err(std::io::Error::other)?;
                    std::fs::write(tmp.join(PENDING_FILE), json)?;
                }
                let config = toml::to_string(&self.config).map_err(std::io::Error::other)?;
                std::fs::write(tmp.join("config.toml"), config)?;
                std::fs::write(
                    tmp.join("state.json"),
                    serde_json::to_string_pretty(&state).expect("state serializes"),
                )
            },
        )
        .map_err(|e| failure.take().unwrap_or_else(|| io(&root)(e)))?;
        Ok(final_dir)
    }
}
