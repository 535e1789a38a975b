//! Where one decode step of SmolLM2 spends its time, piece by piece (batch and context
//! from the command line): `cargo run --release -p agentfly-engine --example
//! decode_profile -- 1 64`.

use agentfly_model::Pretrained;
use burn::tensor::activation::silu;
use burn::tensor::module::{attention, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Distribution, Int, Tensor};
use std::time::Instant;

#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn time(label: &str, reps: usize, mut f: impl FnMut() -> Tensor<3>) {
    let _ = f().into_data();
    let start = Instant::now();
    for _ in 0..reps {
        let _ = f().into_data();
    }
    println!(
        "{label:<40} {:>9.3} ms",
        start.elapsed().as_secs_f64() * 1e3 / reps as f64
    );
}

fn main() {
    agentfly_model::alloc::retain_freed_memory();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (batch, ctx) = (
        args.first().copied().unwrap_or(1),
        args.get(1).copied().unwrap_or(64),
    );
    let device = Device::flex();
    let model = Pretrained::load(agentfly_model::io::smollm2::DEFAULT_MODEL, &device).unwrap();
    if std::env::args().any(|a| a == "--generate") {
        // The real loop, for `perf record`.
        let prompts: Vec<Vec<u32>> = (0..batch)
            .map(|i| {
                (0..ctx as u32)
                    .map(|t| 100 + (t * 31 + i as u32) % 40000)
                    .collect()
            })
            .collect();
        let params = agentfly_engine::generate::SamplingParams {
            ignore_eos: true,
            ..agentfly_engine::generate::SamplingParams::greedy(64)
        };
        let start = Instant::now();
        agentfly_engine::generate::generate(&model, &prompts, &params, None)
            .expect("prompts fit the context");
        println!(
            "generate {batch}x64: {:.2} s",
            start.elapsed().as_secs_f64()
        );
        return;
    }
    let b = &model.decoder.blocks[0];
    let x = Tensor::<3>::random([batch, 1, 576], Distribution::Normal(0.0, 1.0), &device);
    let reps = 50;
    time("qkv proj [b,1,576]x[576,960]", reps, || {
        linear(
            x.clone(),
            b.attention.qkv.weight.val(),
            b.attention.qkv.bias.as_ref().map(|p| p.val()),
        )
    });
    time("gate_up proj [576,3072]", reps, || {
        linear(x.clone(), b.mlp.gate_up.weight.val(), None)
    });
    let h = Tensor::<3>::random([batch, 1, 1536], Distribution::Normal(0.0, 1.0), &device);
    time("down proj [1536,576]", reps, || {
        linear(h.clone(), b.mlp.down.weight.val(), None)
    });
    time("silu*mul [b,1,1536]", reps, || silu(h.clone()) * h.clone());
    time("rmsnorm", reps, || {
        let v = x.clone().powi_scalar(2).mean_dim(2);
        x.clone() * (v + 1e-5).sqrt().recip()
    });
    let q = Tensor::<4>::random([batch, 9, 1, 64], Distribution::Normal(0.0, 1.0), &device);
    let k = Tensor::<4>::random([batch, 9, ctx, 64], Distribution::Normal(0.0, 1.0), &device);
    let opts = || AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: false,
    };
    time("attention fused, no mask", reps, || {
        attention(q.clone(), k.clone(), k.clone(), None, None, opts()).reshape([batch, 9, 64])
    });
    let mask = Tensor::<4, burn::tensor::Bool>::from_data(
        burn::tensor::TensorData::new(vec![false; batch * ctx], [batch, 1, 1, ctx]),
        &device,
    );
    time("attention fused, mask", reps, || {
        attention(
            q.clone(),
            k.clone(),
            k.clone(),
            Some(mask.clone().expand([batch, 9, 1, ctx])),
            None,
            opts(),
        )
        .reshape([batch, 9, 64])
    });
    time("attention manual", reps, || {
        let s = q.clone().matmul(k.clone().swap_dims(2, 3)) / 8.0;
        burn::tensor::activation::softmax(s, 3)
            .matmul(k.clone())
            .reshape([batch, 9, 64])
    });
    let kv = Tensor::<4>::random([batch, 3, ctx, 64], Distribution::Normal(0.0, 1.0), &device);
    let step = Tensor::<4>::random([batch, 3, 1, 64], Distribution::Normal(0.0, 1.0), &device);
    time("kv cat", reps, || {
        Tensor::cat(vec![kv.clone(), step.clone()], 2).reshape([batch * 3, ctx + 1, 64])
    });
    time("gqa expand+reshape", reps, || {
        kv.clone()
            .unsqueeze_dim::<5>(2)
            .expand([batch, 3, 3, ctx, 64])
            .reshape([batch, 9 * ctx, 64])
    });
    let e = model.decoder.embed.val();
    time("lm head as embed @ x^T", 10, || {
        let flat = x.clone().reshape([batch, 576]);
        e.clone()
            .matmul(flat.transpose())
            .transpose()
            .reshape([batch, 1, 49152])
    });
    let et = Tensor::<2>::from_data(e.clone().transpose().into_data(), &device);
    time("lm head contiguous [576,49152]", 10, || {
        linear(x.clone(), et.clone(), None)
    });
    time("lm head [576,49152]", 10, || {
        linear(x.clone(), model.decoder.embed.val().transpose(), None)
    });
    let pos = Tensor::<2, Int>::zeros([batch, 1], &device);
    time("rope tables", reps, || {
        let (c, _) = model.rope.tables(pos.clone());
        c.reshape([batch, 1, 64])
    });
    let ids = Tensor::<2, Int>::zeros([batch, 1], &device);
    time("whole step (no cache, 1 token)", 10, || {
        model.decoder.logits(model.decoder.hidden(
            agentfly_model::model::ForwardInput {
                ids: ids.clone(),
                positions: pos.clone(),
                windows: None,
            },
            &model.rope,
            None,
        ))
    });
}
