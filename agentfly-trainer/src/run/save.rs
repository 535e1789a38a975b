//! Writing a run out: the policy in Hugging Face layout, and checkpoints (policy, optimizer,
//! critic, configuration, position), each committed atomically through `checkpoint`.

use super::batch::PENDING_FILE;
use super::checkpoint::{self, RunState};
use super::error::{TrainError, io};
use super::trainer::Trainer;
use crate::sync::lock;
use agentfly_model::Pretrained;
use agentfly_model::model::Rope;
use std::path::{Path, PathBuf};

/// Where a checkpoint or a saved model keeps the adapters alone (PEFT's layout), when the
/// run trains adapters (`[lora]`); the model beside it has them merged.
pub const ADAPTER_DIR: &str = "adapter";

impl Trainer {
    /// Writes the adapters alone into `dir/adapter` in PEFT's layout (nothing without
    /// `[lora]`).
    fn write_adapter(&self, dir: &Path) -> Result<(), agentfly_model::ModelError> {
        let Some(lora) = &self.config.lora else {
            return Ok(());
        };
        agentfly_model::model::save_adapter(
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
    fn write_model(&self, dir: &Path) -> Result<(), agentfly_model::ModelError> {
        write_model_files(self.written_now().as_deref(), dir, |dir| {
            self.pretrained().save(dir)
        })
    }

    /// Records that the model directory `dir` (committed) holds the weights of `version`.
    fn remember_written(&self, version: u64, dir: PathBuf) {
        *lock(&self.written) = Some((version, dir));
    }

    /// Writes the policy in Hugging Face layout (transformers loads it), atomically.
    pub fn save_model(&self, dir: &Path) -> Result<(), TrainError> {
        // The checkpoint being written may hold these weights, to link.
        self.finish_writing()?;
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
        self.remember_written(self.actor.version(), dir.to_path_buf());
        Ok(())
    }

    /// Writes a checkpoint of this step (policy, optimizer, position, the batch rolled out
    /// for the next step when there is one) atomically, and waits for it (and for any
    /// checkpoint still being written before it).
    pub fn save_checkpoint(&self) -> Result<PathBuf, TrainError> {
        let dir = self.save_checkpoint_in_background()?;
        self.finish_writing()?;
        Ok(dir)
    }

    /// Starts writing a checkpoint of this step on a thread of its own and returns its
    /// directory, once the checkpoint before it is written (whose error it returns). What
    /// the checkpoint holds is taken now, the weights and the optimizer's state shared,
    /// not copied (an update that began while the writer still held them would copy them
    /// before writing: Burn's buffers are copied on write; after a rollout the writer is
    /// long done), so the next step runs while the files are written and synced: ~4–5 s a
    /// step for a full model's 1.6 GB on 2 cores. [`finish_writing`](Self::finish_writing)
    /// waits for it; a crash meanwhile leaves the previous checkpoint, as a crash while
    /// writing in the foreground does.
    pub fn save_checkpoint_in_background(&self) -> Result<PathBuf, TrainError> {
        self.finish_writing()?;
        let root = self.config.output.dir.join("checkpoints");
        let dir = checkpoint::step_dir(&root, self.step);
        let state = RunState {
            step: self.step,
            cursor: self.sampler.cursor,
            sft_done: self.sft_done,
            param_ids: checkpoint::param_ids(self.actor.decoder()),
        };
        let version = self.actor.version();
        let files = CheckpointFiles {
            keep: self.config.output.keep_checkpoints,
            link_from: self.written_now(),
            model: self.pretrained(),
            adapter: self.config.lora.clone().map(|lora| {
                (
                    self.actor.decoder().clone(),
                    lora,
                    self.config.model.path.to_string_lossy().into_owned(),
                )
            }),
            optimizer: self.actor.optimizer().clone(),
            critic: self
                .critic
                .as_ref()
                .map(|c| (c.head.clone(), c.optimizer().clone())),
            pending: match &self.pending {
                Some(batch) => Some(serde_json::to_string(batch).map_err(io(&dir))?),
                None => None,
            },
            config: toml::to_string(&self.config).map_err(io(&dir))?,
            state: serde_json::to_string_pretty(&state).expect("state serializes"),
        };
        let (root_at, dir_at) = (root.clone(), dir.clone());
        let writing = std::thread::Builder::new()
            .name("agentfly-checkpoint".into())
            .spawn(move || files.write(&root_at, &dir_at).map(|()| (version, dir_at)))
            .map_err(io(&root))?;
        *lock(&self.writing) = Some(writing);
        Ok(dir)
    }

    /// Waits for the checkpoint being written in the background, if any, and records the
    /// model it wrote (later saves of the same weights link its files); returns its error.
    pub fn finish_writing(&self) -> Result<(), TrainError> {
        let Some(writing) = lock(&self.writing).take() else {
            return Ok(());
        };
        let (version, dir) = writing.join().map_err(|panic| TrainError::Io {
            path: self.config.output.dir.join("checkpoints"),
            message: format!(
                "the checkpoint writer panicked: {}",
                agentfly_core::tool::panic_message(panic.as_ref())
            ),
        })??;
        self.remember_written(version, dir.join("model"));
        Ok(())
    }

    /// The saved model directory holding the current weights, if there is one.
    fn written_now(&self) -> Option<PathBuf> {
        let version = self.actor.version();
        lock(&self.written)
            .clone()
            .filter(|(v, from)| *v == version && from.join(WEIGHTS_FILE).is_file())
            .map(|(_, from)| from)
    }
}

impl Drop for Trainer {
    /// Waits for a checkpoint still being written (its error, if any, is printed).
    fn drop(&mut self) {
        if let Err(e) = self.finish_writing() {
            eprintln!("the last checkpoint was not written: {e}");
        }
    }
}

/// Everything a checkpoint writes, owned, so that a thread of its own can write it.
struct CheckpointFiles {
    keep: usize,
    /// A saved model directory holding these weights: its files are linked.
    link_from: Option<PathBuf>,
    model: Pretrained,
    /// The adapted policy, its adapters' settings and the base model's name (`[lora]`).
    adapter: Option<(
        agentfly_model::model::Decoder,
        agentfly_model::model::LoraConfig,
        String,
    )>,
    optimizer: burn::optim::ModuleOptimizer,
    critic: Option<(crate::train::ValueHead, burn::optim::ModuleOptimizer)>,
    pending: Option<String>,
    config: String,
    state: String,
}

impl CheckpointFiles {
    /// Commits the checkpoint `dir` under `root` (see [`checkpoint::commit`]).
    fn write(self, root: &Path, dir: &Path) -> Result<(), TrainError> {
        let mut failure = None;
        checkpoint::commit(root, dir, self.keep, |tmp| {
            let written = write_model_files(self.link_from.as_deref(), &tmp.join("model"), |dir| {
                self.model.save(dir)
            });
            let adapter = written.and_then(|()| match &self.adapter {
                Some((decoder, lora, base)) => agentfly_model::model::save_adapter(
                    decoder,
                    &self.model.config,
                    lora,
                    base,
                    &tmp.join(ADAPTER_DIR),
                ),
                None => Ok(()),
            });
            if let Err(e) = adapter {
                failure = Some(TrainError::Model(e));
                return Err(std::io::Error::other("model"));
            }
            self.optimizer
                .save(tmp.join("optimizer.bpk"))
                .map_err(|e| std::io::Error::other(format!("optimizer state: {e:?}")))?;
            if let Some((head, optimizer)) = &self.critic {
                checkpoint::save_critic(tmp, head, optimizer).map_err(std::io::Error::other)?;
            }
            if let Some(json) = &self.pending {
                std::fs::write(tmp.join(PENDING_FILE), json)?;
            }
            std::fs::write(tmp.join("config.toml"), &self.config)?;
            std::fs::write(tmp.join("state.json"), &self.state)
        })
        .map_err(|e| failure.take().unwrap_or_else(|| io(root)(e)))
    }
}

/// The weights' file in a model directory.
const WEIGHTS_FILE: &str = "model.safetensors";

/// Fills the model directory `dir`: hard links to the files of `link_from` (a saved model
/// directory holding these very weights) where there is one and links can be made, else
/// what `save` writes.
fn write_model_files(
    link_from: Option<&Path>,
    dir: &Path,
    save: impl FnOnce(&Path) -> Result<(), agentfly_model::ModelError>,
) -> Result<(), agentfly_model::ModelError> {
    if let Some(from) = link_from {
        if link_files(from, dir).is_ok() {
            return Ok(());
        }
        // A file system without hard links: the files are written below.
        let _ = std::fs::remove_dir_all(dir);
    }
    save(dir)
}

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
