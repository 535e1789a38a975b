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

    /// Writes the policy's model files into `dir` (being filled): hard links to the files
    /// of the last saved model directory when it holds these very weights and is still
    /// there, so a run keeps one copy of each set of weights on disk (the checkpoint after
    /// SFT shares `sft-model`'s, the final model the last checkpoint's); written afresh
    /// otherwise, or where links cannot be made.
    fn write_model(&self, dir: &Path) -> Result<(), crate::ModelError> {
        let version = self.actor.version();
        let same = self
            .written
            .lock()
            .expect("the written-weights record is never poisoned")
            .clone()
            .filter(|(v, from)| *v == version && from.join(WEIGHTS_FILE).is_file());
        if let Some((_, from)) = same {
            if link_files(&from, dir).is_ok() {
                return Ok(());
            }
            // A file system without hard links: the files are written below.
            let _ = std::fs::remove_dir_all(dir);
        }
        self.pretrained().save(dir)
    }

    /// Records that the model directory `dir` (committed) holds the current weights.
    fn remember_written(&self, dir: PathBuf) {
        *self
            .written
            .lock()
            .expect("the written-weights record is never poisoned") =
            Some((self.actor.version(), dir));
    }

    /// Writes the policy in Hugging Face layout (transformers loads it), atomically.
    pub fn save_model(&self, dir: &Path) -> Result<(), TrainError> {
        let mut failure = None;
        checkpoint::replace_dir(dir, |tmp| {
            self.write_model(tmp)
                .and_then(|()| self.write_adapter(tmp))
                .map_err(|e| {
                    failure = Some(TrainError::Model(e));
                    std::io::Error::other("model")
                })
        })
        .map_err(|e| failure.take().unwrap_or_else(|| io(dir)(e)))?;
        self.remember_written(dir.to_path_buf());
        Ok(())
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
        let mut failure = None;
        checkpoint::commit(
            &root,
            &final_dir,
            self.config.output.keep_checkpoints,
            |tmp| {
                if let Err(e) = self
                    .write_model(&tmp.join("model"))
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
        self.remember_written(final_dir.join("model"));
        Ok(final_dir)
    }
}

/// The weights' file in a model directory.
const WEIGHTS_FILE: &str = "model.safetensors";

/// Hard-links every file directly in `from` into `to` (created); subdirectories (a saved
/// model's `adapter/`) are not model files and are left out.
fn link_files(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::hard_link(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}
