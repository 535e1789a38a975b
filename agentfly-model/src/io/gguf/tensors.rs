//! Reading tensors: one at a time, from its offset, dequantized to f32; and the model's
//! weights under their Hugging Face names.

use super::file::{GgufFile, TensorInfo};
use super::names::{hf_name, permuted_heads, unpermute};
use crate::error::ModelError;
use crate::io::{HostTensor, Weights};
use crate::model::ModelConfig;

impl GgufFile {
    /// The table entry of the tensor named `name` (llama.cpp's name).
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's values as f32, in row-major (Hugging Face) shape, as stored.
    pub fn read(&self, info: &TensorInfo) -> Result<HostTensor, ModelError> {
        let bytes = self.bytes_at(self.data_start + info.offset, info.size as usize)?;
        Ok(HostTensor::new(info.shape(), info.kind.dequantize(&bytes)))
    }

    /// Every tensor dequantized to f32, under its Hugging Face name (llama's q/k projections
    /// un-permuted).
    pub fn weights(&self, config: &ModelConfig) -> Result<Weights, ModelError> {
        let mut weights = Weights::new(&self.path);
        for info in &self.tensors {
            let hf = self.hf_name(info)?;
            let mut tensor = self.read(info)?;
            if let Some(heads) = self.permuted_heads(&hf, config) {
                unpermute(&mut tensor.data, &tensor.shape, heads);
            }
            weights.insert(hf, tensor);
        }
        Ok(weights)
    }

    /// The Hugging Face name of a tensor of this file.
    pub(super) fn hf_name(&self, info: &TensorInfo) -> Result<String, ModelError> {
        hf_name(&info.name).ok_or_else(|| {
            ModelError::format(
                &self.path,
                format!("tensor `{}` has no Hugging Face counterpart", info.name),
            )
        })
    }

    /// The heads whose rows this file stores in llama.cpp's interleaved rotary order in
    /// Hugging Face tensor `hf` (the llama architecture's q and k projections).
    pub(super) fn permuted_heads(&self, hf: &str, config: &ModelConfig) -> Option<usize> {
        (self.architecture() == Some("llama"))
            .then(|| permuted_heads(hf, config))
            .flatten()
    }
}
