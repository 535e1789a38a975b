//! Safetensors files: reading f32 / bf16 / f16 tensors (single file or sharded with
//! `model.safetensors.index.json`) and writing f32.

use super::{HostTensor, Weights};
use crate::error::ModelError;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// Reads every tensor of one `.safetensors` file into `weights`, as f32.
pub fn read_file(path: &Path, weights: &mut Weights) -> Result<(), ModelError> {
    let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
    let file = SafeTensors::deserialize(&bytes)
        .map_err(|e| ModelError::format(path, format!("not a valid safetensors file: {e}")))?;
    for (name, view) in file.tensors() {
        let data =
            to_f32(&view).map_err(|m| ModelError::format(path, format!("tensor `{name}`: {m}")))?;
        weights.insert(name, HostTensor::new(view.shape().to_vec(), data));
    }
    Ok(())
}

/// Reads `model.safetensors`, or every shard named by `model.safetensors.index.json`.
pub fn read_dir(dir: &Path) -> Result<Weights, ModelError> {
    let mut weights = Weights::new(dir);
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    if single.exists() {
        read_file(&single, &mut weights)?;
    } else if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(ModelError::io(&index))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::format(&index, format!("not valid JSON: {e}")))?;
        let map = json["weight_map"]
            .as_object()
            .ok_or_else(|| ModelError::format(&index, "no `weight_map` object"))?;
        let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
        for shard in shards {
            read_file(&dir.join(shard), &mut weights)?;
        }
        for name in map.keys() {
            if !weights.contains(name) {
                return Err(ModelError::MissingTensor {
                    path: index.clone(),
                    tensor: name.clone(),
                });
            }
        }
    } else {
        return Err(ModelError::format(
            dir,
            "no model.safetensors or model.safetensors.index.json in this directory",
        ));
    }
    Ok(weights)
}

fn to_f32(view: &TensorView<'_>) -> Result<Vec<f32>, String> {
    let data = view.data();
    let count: usize = view.shape().iter().product();
    let width = match view.dtype() {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(format!(
                "dtype {other:?} is not supported (f32, bf16, f16 are)"
            ));
        }
    };
    if data.len() != count * width {
        return Err(format!(
            "holds {} bytes, its shape needs {}",
            data.len(),
            count * width
        ));
    }
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    })
}

/// Writes `weights` as one f32 safetensors file.
pub fn write_file(weights: &Weights, path: &Path) -> Result<(), ModelError> {
    let bytes: HashMap<&str, Vec<u8>> = weights
        .iter()
        .map(|(name, t)| (name, t.data.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let mut views = Vec::with_capacity(bytes.len());
    for (name, t) in weights.iter() {
        let view = TensorView::new(Dtype::F32, t.shape.clone(), &bytes[name])
            .map_err(|e| ModelError::format(path, format!("tensor `{name}`: {e}")))?;
        views.push((name.to_string(), view));
    }
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(metadata), path)
        .map_err(|e| ModelError::format(path, format!("cannot write safetensors: {e}")))
}
