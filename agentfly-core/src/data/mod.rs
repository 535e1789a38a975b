//! Datasets: the samples chains start from.

mod jsonl;
pub mod pypi;
mod sample;

pub use jsonl::{DataError, read_jsonl, write_jsonl};
pub use sample::Sample;
