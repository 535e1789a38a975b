//! Ready task generators: datasets with exact answers for the ready tools.
//!
//! What they share: writing splits as JSON Lines, and finding a key (a question, a source
//! article) that two splits share.

pub mod arithmetic;
pub mod wiki_qa;

use agentfly_core::Sample;
use agentfly_core::data::{DataError, write_jsonl};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A task's train, validation and test splits (disjoint) and its warm-start
/// demonstrations (of one narrow form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splits<T> {
    /// RL training items.
    pub train: Vec<T>,
    /// Validation items.
    pub val: Vec<T>,
    /// Held-out test items.
    pub test: Vec<T>,
    /// Demonstrations for the warm start.
    pub demos: Vec<T>,
}

/// The splits' names, which are also their files' stems: `train.jsonl`, `val.jsonl`,
/// `test.jsonl` and `demos.jsonl`.
pub const SPLIT_NAMES: [&str; 4] = ["train", "val", "test", "demos"];

impl<T> Splits<T> {
    /// [`SPLIT_NAMES`].
    pub const NAMES: [&'static str; 4] = SPLIT_NAMES;
}

/// Writes each named split into `dir` as `{name}.jsonl`; returns each file's sample count
/// and path.
pub fn write_splits(
    dir: &Path,
    splits: &[(&str, Vec<Sample>)],
) -> Result<Vec<(usize, PathBuf)>, DataError> {
    std::fs::create_dir_all(dir).map_err(|source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    for (name, samples) in splits {
        let path = dir.join(format!("{name}.jsonl"));
        write_jsonl(&path, samples)?;
        written.push((samples.len(), path));
    }
    Ok(written)
}

/// Two named splits whose samples share a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// The first split's name.
    pub first: String,
    /// Its sample.
    pub first_id: String,
    /// The second split's name.
    pub second: String,
    /// The second split's sample.
    pub second_id: String,
    /// The shared key.
    pub key: String,
}

/// The first key (`key` of a sample; samples without one are skipped) found in two of the
/// named splits.
pub fn first_shared(
    splits: &[(&str, &[Sample])],
    key: impl Fn(&Sample) -> Option<String>,
) -> Option<Shared> {
    let mut seen: HashMap<String, (&str, &str)> = HashMap::new();
    for (name, samples) in splits {
        for sample in *samples {
            let Some(k) = key(sample) else {
                continue;
            };
            match seen.get(&k) {
                Some((first, first_id)) if first != name => {
                    return Some(Shared {
                        first: first.to_string(),
                        first_id: first_id.to_string(),
                        second: name.to_string(),
                        second_id: sample.id.clone(),
                        key: k,
                    });
                }
                Some(_) => {}
                None => {
                    seen.insert(k, (name, sample.id.as_str()));
                }
            }
        }
    }
    None
}
