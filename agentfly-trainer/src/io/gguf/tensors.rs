//! Reading tensors: one at a time, from its offset, dequantized to f32; and the model's
//! weights under their Hugging Face names.

use super::file::{GgufFile, TensorInfo};
use super::names::{hf_name, unpermute};
use crate::error::ModelError;
use crate::io::{HostTensor, Weights};
use crate::model::ModelConfig;
use std::io::{Read, Seek, SeekFrom};

impl GgufFile {
    /// The table entry of the tensor named `name` (llama.cpp's name).
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's values as f32, in row-major (Hugging Face) shape, as stored.
    pub fn read(&self, info: &TensorInfo) -> Result<HostTensor, ModelError> {
        let mut bytes = vec![0u8; info.size as usize];
        let mut file = &self.file;
        file.seek(SeekFrom::Start(self.data_start + info.offset))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(ModelError::io(&self.path))?;
        Ok(HostTensor::new(info.shape(), info.kind.dequantize(&bytes)))
    }

    /// Every tensor dequantized to f32, under its Hugging Face name (llama's q/k projections
    /// un-permuted).
    pub fn weights(&self, config: &ModelConfig) -> Result<Weights, ModelError> {
        let permuted = self.architecture() == Some("llama");
        let mut weights = Weights::new(&self.path);
        for info in &self.tensors {
            let hf = hf_name(&info.name).ok_or_else(|| {
                ModelError::format(
                    &self.path,
                    format!("tensor `{}` has no Hugging Face counterpart", info.name),
                )
            })?;
            let mut tensor = self.read(info)?;
            if permuted && hf.ends_with("q_proj.weight") {
                unpermute(&mut tensor.data, &tensor.shape, config.num_attention_heads);
            } else if permuted && hf.ends_with("k_proj.weight") {
                unpermute(&mut tensor.data, &tensor.shape, config.kv_heads());
            }
            weights.insert(hf, tensor);
        }
        Ok(weights)
    }
}
