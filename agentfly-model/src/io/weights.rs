//! Weights on the host, by their Hugging Face names, as every loader produces them and
//! the decoder consumes them.

use crate::error::ModelError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One tensor in row-major f32.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// The shape, outermost first (PyTorch order).
    pub shape: Vec<usize>,
    /// The values.
    pub data: Vec<f32>,
}

impl HostTensor {
    /// A tensor; `data.len()` must be the product of `shape`.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Self { shape, data }
    }

    /// The transpose of a 2-D tensor (`[out, in]` → `[in, out]`).
    pub fn transposed(&self) -> HostTensor {
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let mut data = vec![0.0; self.data.len()];
        for r in 0..rows {
            for c in 0..cols {
                data[c * rows + r] = self.data[r * cols + c];
            }
        }
        HostTensor::new(vec![cols, rows], data)
    }
}

/// Named tensors read from one model file (or directory), in Hugging Face naming
/// (`model.layers.0.self_attn.q_proj.weight`).
#[derive(Debug, Default)]
pub struct Weights {
    source: PathBuf,
    tensors: HashMap<String, HostTensor>,
}

impl Weights {
    /// An empty set read from `source` (named in errors).
    pub fn new(source: impl Into<PathBuf>) -> Self {
        Self {
            source: source.into(),
            tensors: HashMap::new(),
        }
    }

    /// The file or directory the weights came from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Adds a tensor.
    pub fn insert(&mut self, name: impl Into<String>, tensor: HostTensor) {
        self.tensors.insert(name.into(), tensor);
    }

    /// Is there a tensor called `name`?
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The tensor called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.get(name)
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The tensor called `name`, which must have shape `expected`.
    pub fn take(&mut self, name: &str, expected: &[usize]) -> Result<HostTensor, ModelError> {
        let tensor = self
            .tensors
            .remove(name)
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.source.clone(),
                tensor: name.to_string(),
            })?;
        if tensor.shape != expected {
            return Err(ModelError::Shape {
                path: self.source.clone(),
                tensor: name.to_string(),
                found: tensor.shape,
                expected: expected.to_vec(),
            });
        }
        Ok(tensor)
    }

    /// Iterates the tensors (unordered).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostTensor)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }
}
