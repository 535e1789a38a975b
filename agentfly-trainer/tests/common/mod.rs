//! Test data (the reference fixtures and the SmolLM2 GGUF, found by `agentfly-testdata`:
//! missing data fails the test with the command to run) and helpers over it.

#![allow(dead_code)]

use burn::tensor::Device;
use safetensors::SafeTensors;
use std::path::PathBuf;

#[allow(unused_imports)] // each test file uses what it needs
pub use agentfly_testdata::{fixtures, smollm2_gguf};

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
