//! Reading and writing samples as JSON Lines.

use super::Sample;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// A dataset file that cannot be read; names the file and the line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a JSON object, or its id is not a string or a number.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two samples share an id.
    #[error("{path}:{line}: sample id `{id}` appears twice (ids must be unique)")]
    DuplicateId {
        /// The file.
        path: PathBuf,
        /// The second occurrence's line.
        line: usize,
        /// The id.
        id: String,
    },
}

/// Reads one sample per non-empty line: a JSON object whose `id` (a string or a number)
/// names it; a line without one is named by its line number.
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<Sample>, DataError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut samples = Vec::new();
    let mut seen = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| DataError::Line {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let value: Value =
            serde_json::from_str(line).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let Value::Object(mut fields) = value else {
            return Err(bad("expected a JSON object".into()));
        };
        let id = match fields.remove("id") {
            None => format!("line-{line_no}"),
            Some(Value::String(s)) => s,
            Some(Value::Number(n)) => n.to_string(),
            Some(other) => {
                return Err(bad(format!(
                    "`id` must be a string or a number, not {other}"
                )));
            }
        };
        if !seen.insert(id.clone()) {
            return Err(DataError::DuplicateId {
                path: path.to_path_buf(),
                line: line_no,
                id,
            });
        }
        samples.push(Sample { id, fields });
    }
    Ok(samples)
}

/// Writes samples one per line (`id` first), creating or replacing `path`.
pub fn write_jsonl(path: impl AsRef<Path>, samples: &[Sample]) -> Result<(), DataError> {
    let path = path.as_ref();
    let mut text = String::new();
    for sample in samples {
        text.push_str(&serde_json::to_string(sample).expect("samples serialize"));
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_fields_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        std::fs::write(
            &path,
            "{\"id\": \"a\", \"question\": \"1+1\"}\n\n{\"id\": 7, \"answer\": 2}\n{\"q\": 1}\n",
        )
        .unwrap();
        let samples = read_jsonl(&path).unwrap();
        let ids: Vec<_> = samples.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "7", "line-4"]);
        assert_eq!(samples[0].field("question").unwrap(), "1+1");
        let copy = dir.path().join("copy.jsonl");
        write_jsonl(&copy, &samples).unwrap();
        assert_eq!(read_jsonl(&copy).unwrap(), samples);

        std::fs::write(&path, "{\"id\": \"a\"}\n[1]\n").unwrap();
        let err = read_jsonl(&path).unwrap_err().to_string();
        assert!(err.ends_with("d.jsonl:2: expected a JSON object"), "{err}");
        std::fs::write(&path, "{\"id\": \"a\"}\n{\"id\": \"a\"}\n").unwrap();
        let err = read_jsonl(&path).unwrap_err().to_string();
        assert!(err.contains(":2: sample id `a` appears twice"), "{err}");
        std::fs::write(&path, "{\"id\": \"a\",}\n").unwrap();
        assert!(
            read_jsonl(&path)
                .unwrap_err()
                .to_string()
                .contains(":1: not valid JSON")
        );
    }
}
