//! GGUF reading against gguf-py and transformers: every ggml type agentfly reads dequantizes
//! as gguf-py does (`fixtures/ggml-quants`), a Qwen2 GGUF written by llama.cpp's converter
//! computes transformers' logits (`fixtures/tiny-qwen2-gguf`: Qwen2's q/k are stored as
//! Hugging Face stores them, not permuted as llama's are), and a header whose counts or
//! dimensions are corrupt is an error naming the file, not an allocation of what it claims.

use agentfly_testdata::support as common;

use agentfly_model::Pretrained;
use agentfly_model::io::GgufFile;
use agentfly_testdata::gguf_header;
use safetensors::SafeTensors;

fn f32s(file: &SafeTensors<'_>, name: &str) -> Vec<f32> {
    file.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn i64s(file: &SafeTensors<'_>, name: &str) -> Vec<i64> {
    file.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn every_ggml_type_dequantizes_as_gguf_py_does() {
    let dir = common::fixtures().join("ggml-quants");
    let file = GgufFile::open(&dir.join("tensors.gguf")).unwrap();
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&bytes).unwrap();
    let mut seen = Vec::new();
    for info in &file.tensors {
        let got = file.read(info).unwrap();
        assert_eq!(got.shape, [2, 256], "{}", info.name);
        assert_eq!(info.kind.name(), info.name);
        let want = f32s(&reference, &info.name);
        for (i, (g, w)) in got.data.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{} value {i}: {g} vs gguf-py's {w}",
                info.name
            );
        }
        seen.push(info.name.clone());
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "BF16", "F16", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"
        ]
    );
}

#[test]
fn a_qwen2_gguf_computes_the_logits_of_transformers() {
    let dir = common::fixtures().join("tiny-qwen2-gguf");
    let model = Pretrained::load(dir.join("model.gguf"), &common::device()).unwrap();
    assert_eq!(model.config.model_type, "qwen2");
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let reference = SafeTensors::deserialize(&bytes).unwrap();
    let ids = i64s(&reference, "input_ids");
    let columns = i64s(&reference, "vocab_ids");
    let argmax = i64s(&reference, "argmax");
    let want = f32s(&reference, "logits");
    let (rows, len, vocab) = (2, 16, model.config.vocab_size);
    let logits = common::logits(&model, ids, [rows, len]);
    let mut worst = 0.0f32;
    for p in 0..rows * len {
        let row = &logits[p * vocab..(p + 1) * vocab];
        for (c, &col) in columns.iter().enumerate() {
            worst = worst.max((row[col as usize] - want[p * columns.len() + c]).abs());
        }
        let best = (0..vocab)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        assert_eq!(best as i64, argmax[p], "argmax at position {p}");
    }
    assert!(worst < 1e-4, "max |Δlogit| vs transformers = {worst}");
}

#[test]
fn corrupt_counts_and_dimensions_are_errors_not_allocations() {
    let tmp = tempfile::tempdir().unwrap();
    let temp = |name: &str| tmp.path().join(name);
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "count",
            gguf_header(1 << 40, &[4]),
            "the tensor count is 1099511627776",
        ),
        (
            "dims",
            gguf_header(1, &[1 << 40, 1 << 40]),
            "tensor `x` has dimensions",
        ),
        (
            "rank",
            gguf_header(1, &[1, 1, 1, 1, 1]),
            "tensor `x` has 5 dimensions",
        ),
        (
            "data",
            gguf_header(1, &[256]),
            "tensor `x` runs past the end of the file",
        ),
    ];
    for (name, bytes, expected) in cases {
        let path = temp(&format!("{name}.gguf"));
        std::fs::write(&path, bytes).unwrap();
        let err = GgufFile::open(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&path.display().to_string()) && err.contains(expected),
            "{name}: {err}"
        );
    }
    // A whole one reads.
    let mut whole = gguf_header(1, &[4]);
    whole.resize(whole.len().div_ceil(32) * 32, 0);
    whole.extend([1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()));
    let path = temp("whole.gguf");
    std::fs::write(&path, whole).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(
        file.read(&file.tensors[0]).unwrap().data,
        [1.0, 2.0, 3.0, 4.0]
    );
}
