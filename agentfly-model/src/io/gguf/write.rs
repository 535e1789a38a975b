//! Writing a GGUF: a model's weights (a trained policy) under a template file's metadata
//! and tensor names — the file the model was first loaded from — as F32 or F16: what
//! llama.cpp's server loads to serve the new policy, and what our own loader reads back.
//! The template's metadata entries are copied byte for byte (llama.cpp checks their exact
//! types), except `general.file_type`, which says what the file now holds. For the llama
//! architecture the q/k projections are permuted back into llama.cpp's interleaved rotary
//! layout. The file is written beside its destination and renamed over it.

use super::file::{GgufFile, align_up, alignment};
use super::names::permute;
use crate::error::ModelError;
use crate::io::Weights;
use crate::model::ModelConfig;
use std::io::Write;
use std::path::Path;

/// How a written GGUF stores its matrices. Vectors (norms, biases) are F32 either way, as
/// llama.cpp's own converter writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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

impl GgufFile {
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
        let alignment = alignment(&self.metadata);
        // The table first (names, shapes, types, sizes): each tensor's data is converted
        // only when it is written, so the model's bytes are never all held at once.
        let mut table = Vec::with_capacity(self.tensors.len());
        for info in &self.tensors {
            let hf = self.hf_name(info)?;
            let tensor = weights.get(&hf).ok_or_else(|| {
                ModelError::format(
                    &self.path,
                    format!("the weights have no `{hf}` (`{}`)", info.name),
                )
            })?;
            if tensor.shape != info.shape() {
                return Err(ModelError::format(
                    &self.path,
                    format!(
                        "`{hf}` has shape {:?}, the template's `{}` {:?}",
                        tensor.shape,
                        info.name,
                        info.shape()
                    ),
                ));
            }
            let f16 = dtype == GgufDtype::F16 && info.dims.len() > 1;
            table.push((info, tensor, self.permuted_heads(&hf, config), f16));
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
            out.extend_from_slice(&self.bytes_at(range.start, (range.end - range.start) as usize)?);
        }
        push_string(&mut out, "general.file_type");
        out.extend_from_slice(&META_U32.to_le_bytes());
        out.extend_from_slice(&dtype.file_type().to_le_bytes());
        let mut offset = 0u64;
        for (info, _, _, f16) in &table {
            push_string(&mut out, &info.name);
            out.extend_from_slice(&(info.dims.len() as u32).to_le_bytes());
            for &d in &info.dims {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            // ggml's type ids: 0 is F32, 1 is F16.
            out.extend_from_slice(&u32::from(*f16).to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            let size = info.count() as u64 * if *f16 { 2 } else { 4 };
            offset = align_up(offset + size, alignment);
        }
        out.resize(align_up(out.len() as u64, alignment) as usize, 0);

        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(ModelError::io(dir))?;
        let io = |e: std::io::Error| ModelError::io(path)(e);
        file.write_all(&out).map_err(io)?;
        for (_, tensor, heads, f16) in table {
            let mut data = tensor.data.clone();
            if let Some(heads) = heads {
                permute(&mut data, &tensor.shape, heads);
            }
            let mut bytes: Vec<u8> = if f16 {
                data.iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect()
            } else {
                data.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
            bytes.resize(align_up(bytes.len() as u64, alignment) as usize, 0);
            file.write_all(&bytes).map_err(io)?;
        }
        // A temporary file is private (0600); the model is an ordinary file.
        let public = std::os::unix::fs::PermissionsExt::from_mode(0o644);
        file.as_file().set_permissions(public).map_err(io)?;
        file.as_file().sync_all().map_err(io)?;
        file.persist(path).map_err(|e| io(e.error))?;
        // The rename is on disk once the directory is synced.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        std::fs::File::open(dir.unwrap_or(Path::new(".")))
            .and_then(|d| d.sync_all())
            .map_err(io)
    }
}
