//! Why a model could not be loaded, saved or run. Each variant names the file and, where
//! it applies, the tensor.

use std::path::PathBuf;

/// A model I/O failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `config.json` (or GGUF metadata) is missing a key or describes an unsupported model.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A tensor the model needs is absent.
    #[error("{path}: tensor `{tensor}` is missing")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor has the wrong shape.
    #[error("{path}: tensor `{tensor}` has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape in the file.
        found: Vec<usize>,
        /// The shape the config implies.
        expected: Vec<usize>,
    },
    /// The file is not in the format it claims, or is cut short.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong (names the tensor when it is one).
        message: String,
    },
    /// The tokenizer or the chat template failed.
    #[error(transparent)]
    Chat(#[from] agentfly_core::chat::ChatError),
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ModelError {
        let path = path.into();
        move |source| ModelError::Io { path, source }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, message: impl Into<String>) -> ModelError {
        ModelError::Format {
            path: path.into(),
            message: message.into(),
        }
    }
}
