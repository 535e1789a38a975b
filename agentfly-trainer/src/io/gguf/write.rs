//! Writing a GGUF: a model's weights (a trained policy) under a template file's metadata
//! and tensor names — the file the model was first loaded from — as F32 or F16: what
//! llama.cpp's server loads to serve the new policy, and what our own loader reads back.
//! The template's metadata entries are copied byte for byte (llama.cpp checks their exact
//! types), except `general.file_type`, which says what the file now holds. For the llama
//! architecture the q/k projections are permuted back into llama.cpp's interleaved rotary
//! layout. The file is written beside its destination and renamed over it.

use super::file::GgufFile;
use super::names::{hf_name, permute};
use crate::error::ModelError;
use crate::io::Weights;
use crate::model::ModelConfig;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// How a written GGUF stores its matrices. Vectors (norms, biases) are F32 either way, as
/// llama.cpp's own converter writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufDtype {
    /// 4 bytes per weight: exactly the trained values.
    F32,
    /// 2 bytes per weight: half the file, the weights rounded to f16.
    F16,
}

impl GgufDtype {
    /// llama.cpp's `general.file_type` for a file of this type.
    fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
        }
    }
}

/// GGUF's metadata value type of a u32.
const META_U32: u32 = 4;

fn push_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = out.len() as u64;
    out.resize((len.div_ceil(alignment) * alignment) as usize, 0);
}

impl GgufFile {
    /// The data section's alignment.
    fn alignment(&self) -> u64 {
        match self.metadata.get("general.alignment") {
            Some(super::MetaValue::Int(a)) if *a > 0 => *a as u64,
            _ => 32,
        }
    }

    /// This file's metadata entry `range`, as stored.
    fn raw(&self, range: &std::ops::Range<u64>) -> Result<Vec<u8>, ModelError> {
        let mut bytes = vec![0u8; (range.end - range.start) as usize];
        let mut file = &self.file;
        file.seek(SeekFrom::Start(range.start))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(ModelError::io(&self.path))?;
        Ok(bytes)
    }

    /// Writes `weights` (Hugging Face names, as [`Pretrained`](crate::Pretrained) holds
    /// them) to `path` as a GGUF with this file's metadata and tensor table: every tensor
    /// this file has must be in `weights`, with its shape.
    pub fn write_weights(
        &self,
        weights: &Weights,
        config: &ModelConfig,
        dtype: GgufDtype,
        path: &Path,
    ) -> Result<(), ModelError> {
        let alignment = self.alignment();
        let permuted = self.architecture() == Some("llama");
        let mut table = Vec::with_capacity(self.tensors.len());
        for info in &self.tensors {
            let missing = |what: String| ModelError::format(&self.path, what);
            let hf = hf_name(&info.name).ok_or_else(|| {
                missing(format!("tensor `{}` has no Hugging Face name", info.name))
            })?;
            let tensor = weights
                .get(&hf)
                .ok_or_else(|| missing(format!("the weights have no `{hf}` (`{}`)", info.name)))?;
            if tensor.shape != info.shape() {
                return Err(missing(format!(
                    "`{hf}` has shape {:?}, the template's `{}` {:?}",
                    tensor.shape,
                    info.name,
                    info.shape()
                )));
            }
            let mut data = tensor.data.clone();
            if permuted && hf.ends_with("q_proj.weight") {
                permute(&mut data, &tensor.shape, config.num_attention_heads);
            } else if permuted && hf.ends_with("k_proj.weight") {
                permute(&mut data, &tensor.shape, config.kv_heads());
            }
            // ggml's type ids: 0 is F32, 1 is F16.
            let (kind, bytes): (u32, Vec<u8>) = match dtype {
                GgufDtype::F16 if info.dims.len() > 1 => (
                    1,
                    data.iter()
                        .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                        .collect(),
                ),
                _ => (0, data.iter().flat_map(|x| x.to_le_bytes()).collect()),
            };
            table.push((&info.name, &info.dims, kind, bytes));
        }

        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(table.len() as u64).to_le_bytes());
        let kept: Vec<_> = self
            .entries
            .iter()
            .filter(|(key, _)| key != "general.file_type")
            .collect();
        out.extend_from_slice(&(kept.len() as u64 + 1).to_le_bytes());
        for (_, range) in kept {
            out.extend_from_slice(&self.raw(range)?);
        }
        push_string(&mut out, "general.file_type");
        out.extend_from_slice(&META_U32.to_le_bytes());
        out.extend_from_slice(&dtype.file_type().to_le_bytes());
        let mut offset = 0u64;
        for (name, dims, kind, bytes) in &table {
            push_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for &d in dims.iter() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + bytes.len() as u64).div_ceil(alignment) * alignment;
        }
        pad_to(&mut out, alignment);

        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(ModelError::io(dir))?;
        let io = |e: std::io::Error| ModelError::io(path)(e);
        file.write_all(&out).map_err(io)?;
        let mut written = 0u64;
        for (_, _, _, bytes) in &table {
            file.write_all(bytes).map_err(io)?;
            written += bytes.len() as u64;
            let padded = written.div_ceil(alignment) * alignment;
            file.write_all(&vec![0u8; (padded - written) as usize])
                .map_err(io)?;
            written = padded;
        }
        // A temporary file is private (0600); the model is an ordinary file.
        let public = std::os::unix::fs::PermissionsExt::from_mode(0o644);
        file.as_file().set_permissions(public).map_err(io)?;
        file.as_file().sync_all().map_err(io)?;
        file.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }
}
