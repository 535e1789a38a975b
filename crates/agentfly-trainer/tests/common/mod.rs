//! Test data: the reference fixtures and the SmolLM2 GGUF. Missing data fails the test
//! with what to do; nothing is silently skipped.

#![allow(dead_code)]

use burn::tensor::Device;
use safetensors::SafeTensors;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixtures() -> PathBuf {
    let dir = std::env::var_os("AGENTFLY_FIXTURES")
        .map_or_else(|| repo().join("../shared/fixtures"), PathBuf::from);
    assert!(
        dir.join("README.md").exists(),
        "fixtures not found at {} (set AGENTFLY_FIXTURES)",
        dir.display()
    );
    dir
}

pub fn smollm2_gguf() -> PathBuf {
    let path = std::env::var_os("AGENTFLY_SMOLLM2").map_or_else(
        || repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-smollm2.sh (or set AGENTFLY_SMOLLM2)",
        path.display()
    );
    path
}

pub fn device() -> Device {
    Device::flex()
}

/// `(shape, values)` of an f32 tensor and `(shape, values)` of an i64 tensor of a
/// reference safetensors file.
pub fn reference(path: PathBuf) -> (Vec<usize>, Vec<i64>, Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(&path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let ids = file.tensor("input_ids").unwrap();
    let logits = file.tensor("logits").unwrap();
    let id_values = ids
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let logit_values = logits
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (
        ids.shape().to_vec(),
        id_values,
        logits.shape().to_vec(),
        logit_values,
    )
}

/// Logits of one plain forward pass over `ids` shaped `shape`.
pub fn logits(model: &agentfly_trainer::Pretrained, ids: Vec<i64>, shape: [usize; 2]) -> Vec<f32> {
    use burn::tensor::{Int, Tensor, TensorData};
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, shape), &device());
    model
        .decoder
        .forward(ids, &model.rope)
        .into_data()
        .try_to_vec()
        .unwrap()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
