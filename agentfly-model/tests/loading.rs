//! Loading paths beyond the plain directory: sharded safetensors with an index, bf16 and
//! f16 tensors, and broken GGUF files that must fail naming the file and the tensor.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use agentfly_model::io::{HostTensor, Weights, read_safetensors_file, write_safetensors};
use safetensors::{Dtype, tensor::TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentfly-loading-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn logits(model: &Pretrained) -> Vec<f32> {
    let ids: Vec<i64> = (0..10).map(|i| (i * 53 + 7) % 512).collect();
    common::logits(model, ids, [1, 10])
}

fn saved_tiny(name: &str) -> (Pretrained, PathBuf, Weights) {
    let model = Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap();
    let dir = temp_dir(name);
    model.save(&dir).unwrap();
    let mut weights = Weights::new(&dir);
    read_safetensors_file(&dir.join("model.safetensors"), &mut weights).unwrap();
    (model, dir, weights)
}

#[test]
fn sharded_safetensors_with_an_index_load_like_one_file() {
    let (model, dir, weights) = saved_tiny("sharded");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let mut shards = [Weights::new(&dir), Weights::new(&dir)];
    let mut map = serde_json::Map::new();
    for (i, name) in weights.names().into_iter().enumerate() {
        let shard = i % 2;
        let file = format!("model-0000{}-of-00002.safetensors", shard + 1);
        shards[shard].insert(
            name,
            weights.iter().find(|(n, _)| *n == name).unwrap().1.clone(),
        );
        map.insert(name.to_string(), file.into());
    }
    for (i, shard) in shards.iter().enumerate() {
        write_safetensors(
            shard,
            &dir.join(format!("model-0000{}-of-00002.safetensors", i + 1)),
        )
        .unwrap();
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let sharded = Pretrained::load(&dir, &common::device()).unwrap();
    assert_eq!(logits(&sharded), logits(&model));
    std::fs::remove_dir_all(dir).unwrap();
}

fn write_half(weights: &Weights, path: &Path, dtype: Dtype) {
    let bytes: HashMap<&str, Vec<u8>> = weights
        .iter()
        .map(|(name, t)| {
            let data = t.data.iter().flat_map(|&x| match dtype {
                Dtype::BF16 => half::bf16::from_f32(x).to_le_bytes(),
                _ => half::f16::from_f32(x).to_le_bytes(),
            });
            (name, data.collect())
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = weights
        .iter()
        .map(|(name, t)| {
            (
                name.to_string(),
                TensorView::new(dtype, t.shape.clone(), &bytes[name]).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

#[test]
fn bf16_and_f16_weights_are_widened_to_f32() {
    for (dtype, round) in [
        (
            Dtype::BF16,
            (|x: f32| half::bf16::from_f32(x).to_f32()) as fn(f32) -> f32,
        ),
        (Dtype::F16, |x: f32| half::f16::from_f32(x).to_f32()),
    ] {
        let (_, dir, weights) = saved_tiny(&format!("{dtype:?}"));
        write_half(&weights, &dir.join("model.safetensors"), dtype);
        let mut loaded = Weights::new(&dir);
        read_safetensors_file(&dir.join("model.safetensors"), &mut loaded).unwrap();
        for (name, original) in weights.iter() {
            let got = loaded.iter().find(|(n, _)| *n == name).unwrap().1;
            let expected: Vec<f32> = original.data.iter().map(|&x| round(x)).collect();
            assert_eq!(
                got,
                &HostTensor::new(original.shape.clone(), expected),
                "{name} as {dtype:?}"
            );
        }
        // And the whole model runs from it.
        let model = Pretrained::load(&dir, &common::device()).unwrap();
        assert!(logits(&model).iter().all(|x| x.is_finite()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn a_truncated_gguf_names_the_file_and_the_tensor() {
    let gguf = std::fs::read(common::smollm2_gguf()).unwrap();
    let dir = temp_dir("gguf");
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &gguf[..gguf.len() / 2]).unwrap();
    let err = Pretrained::load(&cut, &common::device())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("{}: tensor `blk.", cut.display())),
        "{err}"
    );
    assert!(
        err.ends_with("runs past the end of the file (truncated?)"),
        "{err}"
    );
    let header_only = dir.join("header.gguf");
    std::fs::write(&header_only, &gguf[..1000]).unwrap();
    let err = Pretrained::load(&header_only, &common::device())
        .unwrap_err()
        .to_string();
    // Cut inside the header: the tensor count no longer fits what is left of the file.
    assert!(
        err.starts_with(&format!("{}: corrupt GGUF header", header_only.display()))
            && err.contains("the tensor count is"),
        "{err}"
    );
    let not_gguf = dir.join("text.gguf");
    std::fs::write(&not_gguf, b"hello world, not a model").unwrap();
    let err = Pretrained::load(&not_gguf, &common::device())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!("{}: not a GGUF file (no GGUF magic)", not_gguf.display())
    );
    std::fs::remove_dir_all(dir).unwrap();
}
