//! The decoder on a GPU backend agrees with the CPU backend and with transformers.
//! Built only with `--features wgpu` or `--features cuda`; `AGENTFLY_GPU_DEVICE` names the
//! device (default `wgpu` when that feature is built, else `cuda`). Without a GPU, wgpu
//! runs on Mesa's software Vulkan (`apt-get install mesa-vulkan-drivers libvulkan1`):
//! `cargo test -p agentfly-trainer --features wgpu --test gpu_parity`; on a CUDA machine
//! `scripts/gpu-check` runs it with `--features cuda`.

#![cfg(any(feature = "wgpu", feature = "cuda"))]

mod common;

use agentfly_trainer::Pretrained;
use agentfly_trainer::device::parse_device;
use agentfly_trainer::generate::{SamplingParams, generate};
use burn::tensor::{Int, Tensor, TensorData};

/// The GPU device under test.
fn gpu() -> String {
    std::env::var("AGENTFLY_GPU_DEVICE").unwrap_or_else(|_| {
        if cfg!(feature = "wgpu") {
            "wgpu".into()
        } else {
            "cuda".into()
        }
    })
}

#[test]
fn tiny_qwen2_on_the_gpu_matches_transformers_and_the_cpu() {
    let fixtures = common::fixtures();
    let name = gpu();
    let device = parse_device(&name).unwrap();
    let gpu = Pretrained::load(fixtures.join("tiny-qwen2"), &device).unwrap();
    let (shape, ids, _, expected) =
        common::reference(fixtures.join("tiny-qwen2/reference.safetensors"));
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [shape[0], shape[1]]), &device);
    let got: Vec<f32> = gpu
        .decoder
        .forward(input, &gpu.rope)
        .into_data()
        .try_to_vec()
        .unwrap();
    let diff = common::max_abs_diff(&got, &expected);
    assert!(diff < 1e-4, "{name}: max |Δlogit| vs transformers = {diff}");

    let cpu = Pretrained::load(fixtures.join("tiny-qwen2"), &common::device()).unwrap();
    let prompt: Vec<u32> = vec![37, 235, 396, 72, 255, 393, 203, 133];
    let params = SamplingParams {
        ignore_eos: true,
        ..SamplingParams::greedy(12)
    };
    let on_gpu = generate(&gpu, std::slice::from_ref(&prompt), &params, None).unwrap();
    let on_cpu = generate(&cpu, &[prompt], &params, None).unwrap();
    assert_eq!(on_gpu[0].new_ids, on_cpu[0].new_ids);
}
