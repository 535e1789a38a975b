//! What stops a training run.

use super::config::ConfigError;
use agentfly_core::RegistryError;
use agentfly_core::data::DataError;
use agentfly_model::ModelError;
use std::path::{Path, PathBuf};

/// A run that cannot start or go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model cannot be loaded or saved.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A dataset cannot be read.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A tool or reward is not linked.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A file of the run cannot be written or read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The engine stopped.
    #[error("generation engine: {0}")]
    Engine(String),
    /// The caller's `after_step` of [`Trainer::train_with`](super::Trainer::train_with)
    /// failed.
    #[error("after step: {0}")]
    AfterStep(Box<dyn std::error::Error + Send + Sync>),
    /// Too many trajectories of a step got no reward.
    #[error(
        "step {step}: {failed} of {total} trajectories got no reward (more than \
         train.max_reward_failures = {max}); the first: {first}"
    )]
    Rewards {
        /// The step.
        step: usize,
        /// Trajectories without a reward.
        failed: usize,
        /// Trajectories rolled out.
        total: usize,
        /// The share allowed.
        max: f64,
        /// Why the first one failed.
        first: String,
    },
    /// Too many chains of a held-out evaluation failed (not answered wrongly: failed), even
    /// after retries.
    #[error(
        "evaluation: {failed} of {total} chains failed after {retries} retries (more than \
         eval.max_failures = {max}), so no accuracy is reported; the first: {first}"
    )]
    Evaluation {
        /// Chains that failed.
        failed: usize,
        /// Samples evaluated.
        total: usize,
        /// Retries of the failed samples.
        retries: usize,
        /// The share allowed.
        max: f64,
        /// Why the first one failed.
        first: String,
    },
    /// Every step of the run skipped its update because a loss or gradient was not finite.
    #[error(
        "no update was applied in {steps} step(s): every one was skipped ({reason}); the \
         weights are unchanged"
    )]
    NoUpdate {
        /// Steps run.
        steps: usize,
        /// The last skip's reason.
        reason: String,
    },
    /// A demonstration cannot be used for SFT.
    #[error("{path}: demonstration `{sample}`: {message}")]
    Demo {
        /// The file.
        path: PathBuf,
        /// The sample's id.
        sample: String,
        /// What is wrong.
        message: String,
    },
}

/// An I/O error about `path` as a [`TrainError`].
pub(crate) fn io<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> TrainError + '_ {
    move |e| TrainError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl TrainError {
    /// Names `file` in a configuration error found after the file was read (a device or
    /// bf16 setting the machine cannot honour), which the trainer can only label
    /// `<config>`.
    pub fn in_file(self, file: &Path) -> Self {
        match self {
            TrainError::Config(mut e) if e.path.as_os_str() == "<config>" => {
                e.path = file.to_path_buf();
                TrainError::Config(e)
            }
            other => other,
        }
    }
}
