//! Why a tokenizer or chat template could not be built or used.

use std::path::PathBuf;

/// A tokenizer or chat-template failure; each names the file or the template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tokenizer could not be built or failed.
    #[error("tokenizer ({context}): {message}")]
    Tokenizer {
        /// What was being done (file name, "encode", ...).
        context: String,
        /// What the tokenizers crate said.
        message: String,
    },
    /// The template does not compile.
    #[error("chat template does not compile: {0:#}")]
    TemplateSyntax(minijinja::Error),
    /// Rendering failed (including the template's own `raise_exception`).
    #[error("chat template failed to render: {0:#}")]
    TemplateRender(minijinja::Error),
    /// No chat template was found where one was expected.
    #[error("no chat template in {0}: expected a `chat_template` field (or a .jinja file)")]
    NoTemplate(String),
    /// A JSON file had the wrong shape.
    #[error("{path}: {message}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}
