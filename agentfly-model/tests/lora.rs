//! Low-rank adapters: attached adapters compute what their merged weights compute, they
//! survive being written and read back exactly, and PEFT (Hugging Face's adapter library)
//! loads what we write and computes our logits. Needs `.venv-bench` with peft
//! (`scripts/test` makes it) or `AGENTFLY_PYTHON`.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use agentfly_model::io::{HostTensor, Weights, write_safetensors};
use agentfly_model::model::{LoraConfig, read_adapter, save_adapter};
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use std::process::Command;

/// The adapter tensors of `like`, filled with seeded values (fresh adapters have `B = 0`,
/// which would test nothing).
fn random_adapters(like: &Weights) -> Weights {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut out = Weights::new("random");
    for name in like.names() {
        let t = like.get(name).unwrap();
        let n = t.shape.iter().product();
        let data = (0..n).map(|_| rng.random_range(-0.2f32..0.2)).collect();
        out.insert(name, HostTensor::new(t.shape.clone(), data));
    }
    out
}

fn max_diff(a: Tensor<3>, b: Tensor<3>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

#[test]
fn adapters_merge_round_trip_and_load_in_peft() {
    let device = common::device();
    let base_dir = common::fixtures().join("tiny-qwen2");
    let model = Pretrained::load(&base_dir, &device).unwrap();
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        ..LoraConfig::default()
    };
    let fresh = model.decoder.clone().with_lora(&model.config, &lora, 0);
    let shapes = fresh.lora_weights(&model.config);
    assert_eq!(shapes.names().len(), 7 * 2 * model.config.num_hidden_layers);
    let ids: Vec<i64> = (0..24).map(|i| (i * 37 + 5) % 100).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, 24]), &device);
    let base_logits = model.decoder.forward(ids.clone(), &model.rope);
    // Fresh adapters change nothing.
    let diff = max_diff(fresh.forward(ids.clone(), &model.rope), base_logits.clone());
    assert!(diff < 1e-6, "fresh adapters moved the logits by {diff}");

    let want = random_adapters(&shapes);
    let adapted = model
        .decoder
        .clone()
        .with_lora_weights(&model.config, &lora, &mut random_adapters(&shapes))
        .unwrap();
    let logits = adapted.forward(ids.clone(), &model.rope);
    let effect = max_diff(logits.clone(), base_logits);
    assert!(effect > 1e-2, "the adapters change the logits ({effect})");
    let merged = max_diff(
        adapted.merged().forward(ids.clone(), &model.rope),
        logits.clone(),
    );
    assert!(
        merged < 1e-5,
        "merged weights differ from the adapters by {merged}"
    );

    let dir = tempfile::tempdir().unwrap();
    let adapter_dir = dir.path().join("adapter");
    save_adapter(
        &adapted,
        &model.config,
        &lora,
        &base_dir.to_string_lossy(),
        &adapter_dir,
    )
    .unwrap();
    let back = read_adapter(&adapter_dir).unwrap();
    assert_eq!(back.names(), want.names());
    for name in want.names() {
        assert_eq!(back.get(name).unwrap(), want.get(name).unwrap(), "{name}");
    }

    let mut reference = Weights::new("reference");
    let [b, t, v] = logits.dims();
    reference.insert(
        "logits",
        HostTensor::new(
            vec![b, t, v],
            logits.into_data().try_to_vec::<f32>().unwrap(),
        ),
    );
    let id_values: Vec<f32> = ids
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap()
        .into_iter()
        .map(|i| i as f32)
        .collect();
    reference.insert("ids", HostTensor::new(vec![1, 24], id_values));
    let reference_file = dir.path().join("ours.safetensors");
    write_safetensors(&reference, &reference_file).unwrap();
    let out = Command::new(agentfly_testdata::python())
        .arg(agentfly_testdata::repo().join("scripts/bench/check_peft_adapter.py"))
        .arg("--base")
        .arg(&base_dir)
        .arg("--adapter")
        .arg(&adapter_dir)
        .arg("--reference")
        .arg(&reference_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PEFT failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let diff = result["max_abs_diff"].as_f64().unwrap();
    assert!(diff < 1e-4, "PEFT's logits differ from ours by {diff}");
    assert!(
        result["adapter_effect"].as_f64().unwrap() > 1e-2,
        "{result}"
    );
}
