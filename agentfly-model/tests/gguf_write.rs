//! Writing GGUF files: a model's weights under its template's metadata read back by our
//! own loader — exactly in F32, within f16 rounding in F16 — for the llama architecture
//! (SmolLM2: q/k permuted back into llama.cpp's layout) and for Qwen2 (stored as is),
//! with the template's metadata, tokenizer and chat template kept.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use agentfly_model::io::{GgmlType, GgufDtype, GgufFile, MetaValue};
use std::path::Path;

/// Writes `model` under `template` as `dtype`, reads it back, and returns the largest
/// difference between any weight written and read, relative to the weight's size.
fn round_trip(template: &Path, dtype: GgufDtype) -> f32 {
    let device = common::device();
    let model = Pretrained::load(template, &device).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.gguf");
    model.save_gguf(template, dtype, &path).unwrap();

    let (before, after) = (
        GgufFile::open(template).unwrap(),
        GgufFile::open(&path).unwrap(),
    );
    for (key, value) in &before.metadata {
        if key != "general.file_type" {
            assert_eq!(after.metadata.get(key), Some(value), "metadata `{key}`");
        }
    }
    let file_type = if dtype == GgufDtype::F32 { 0 } else { 1 };
    assert_eq!(
        after.metadata["general.file_type"],
        MetaValue::Int(file_type)
    );
    assert_eq!(after.tensors.len(), before.tensors.len());
    for (a, b) in after.tensors.iter().zip(&before.tensors) {
        assert_eq!((&a.name, &a.dims), (&b.name, &b.dims));
        let want = match dtype {
            GgufDtype::F16 if a.dims.len() > 1 => GgmlType::F16,
            _ => GgmlType::F32,
        };
        assert_eq!(a.kind, want, "{}", a.name);
    }

    let again = Pretrained::load(&path, &device).unwrap();
    assert_eq!(again.config, model.config);
    let text = "Put the soap in the bathroom cabinet, then <tool_call> 12 * 7 </tool_call>";
    let encode = |m: &Pretrained| m.tokenizer.as_ref().map(|t| t.encode(text, true).unwrap());
    assert!(encode(&model).is_some());
    assert_eq!(encode(&again), encode(&model));
    assert_eq!(again.tokenizer_config, model.tokenizer_config);
    let (w, w2) = (
        model.decoder.to_weights(&model.config),
        again.decoder.to_weights(&again.config),
    );
    let mut worst = 0.0f32;
    for (name, t) in w.iter() {
        let t2 = w2.get(name).unwrap_or_else(|| panic!("{name} read back"));
        assert_eq!(t.shape, t2.shape, "{name}");
        for (a, b) in t.data.iter().zip(&t2.data) {
            worst = worst.max((a - b).abs() / a.abs().max(1e-3));
        }
    }
    worst
}

#[test]
fn a_written_smollm2_gguf_reads_back_exactly_in_f32_and_within_rounding_in_f16() {
    let template = common::smollm2_gguf();
    assert_eq!(round_trip(&template, GgufDtype::F32), 0.0);
    // f16 keeps 11 significant bits: a relative error of at most 2^-11 (below 1e-3
    // in magnitude, the absolute error is what is bounded).
    let f16 = round_trip(&template, GgufDtype::F16);
    assert!(
        f16 > 0.0 && f16 <= 1.0 / 2048.0 + 1e-6,
        "f16 round trip: {f16}"
    );
}

#[test]
fn a_written_qwen2_gguf_reads_back_exactly() {
    let template = common::fixtures()
        .join("tiny-qwen2-gguf")
        .join("model.gguf");
    assert_eq!(round_trip(&template, GgufDtype::F32), 0.0);
}
