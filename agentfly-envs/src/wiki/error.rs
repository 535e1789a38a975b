//! What can go wrong with the corpus or its index.

use std::path::{Path, PathBuf};

/// What went wrong with the corpus or its index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WikiError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The corpus file is not what was expected.
    #[error("the wiki corpus: {0}")]
    Corpus(String),
    /// The search engine failed.
    #[error("the search index: {0}")]
    Index(#[from] tantivy::TantivyError),
    /// No article has that title.
    #[error("no article is titled \"{title}\"{}", closest_list(closest))]
    UnknownTitle {
        /// The title asked for.
        title: String,
        /// The closest titles, best first.
        closest: Vec<String>,
    },
}

fn closest_list(closest: &[String]) -> String {
    if closest.is_empty() {
        String::new()
    } else {
        format!("; the closest titles: {}", closest.join("; "))
    }
}

impl WikiError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> WikiError {
        WikiError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
