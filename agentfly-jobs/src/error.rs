//! What can stop a job. Every variant says what was wrong and, where the user can act, what
//! to do.

use agentfly_core::data::DataError;
use agentfly_model::io::smollm2::FetchError;
use agentfly_trainer::run::{ConfigError, TrainError};
use std::path::PathBuf;

/// A job that cannot start or go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A file or directory of the run cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A result file of the run cannot be parsed.
    #[error("{path}: {message} (delete it to redo the stage that wrote it)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The run directory holds a run with other settings.
    #[error(
        "{dir} holds a run with other settings ({differences}); pass --restart to start over or --out DIR for a new run"
    )]
    OtherSettings {
        /// The run directory.
        dir: PathBuf,
        /// `key: old → new` for each setting that differs.
        differences: String,
    },
    /// `--restart` named a directory that is not a run of this job.
    #[error(
        "{dir}: --restart empties only a run directory of this job, and {why}: nothing was removed; pass --out DIR for a new run"
    )]
    NotARun {
        /// The directory.
        dir: PathBuf,
        /// Why it is not one.
        why: String,
    },
    /// The data splits share a question, which would make held-out results meaningless.
    #[error(
        "{dir}: the splits overlap: {overlap}; held-out results would be meaningless (delete the data directory to regenerate it)"
    )]
    Overlap {
        /// The data directory.
        dir: PathBuf,
        /// Which splits and samples.
        overlap: String,
    },
    /// The run is in a state a stage cannot continue from.
    #[error("{0}")]
    State(String),
    /// A chart cannot be drawn or written.
    #[error("{path}: chart: {message}")]
    Chart {
        /// The PNG file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The model cannot be fetched.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Training or evaluation failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// A trainer configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A dataset cannot be read or written.
    #[error(transparent)]
    Data(#[from] DataError),
}

impl JobError {
    /// An I/O error about `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
