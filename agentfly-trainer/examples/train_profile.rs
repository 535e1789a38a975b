//! Where one training step of SmolLM2 spends its time (for `perf record`): forward, backward,
//! clipping and AdamW on the causal-LM loss of `batch × seq` random tokens, `steps` times.
//! `cargo run --release -p agentfly-trainer --example train_profile -- 4 512 3`; with `BF16=1`
//! the projections' products run in bf16 on AMX (`Decoder::use_bf16_products`); with
//! `DITHERED=1` they stay f32 at the weights bf16 starts from (dithered within their bf16
//! cells, `Decoder::dither_for_bf16`).

use agentfly_model::Pretrained;
use agentfly_trainer::train::{OptimConfig, Packed, clip_grad_norm, sft_loss, token_logprobs};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use std::time::Instant;

#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn main() {
    agentfly_model::alloc::retain_freed_memory();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (batch, seq, steps) = (
        args.first().copied().unwrap_or(4),
        args.get(1).copied().unwrap_or(512),
        args.get(2).copied().unwrap_or(3),
    );
    let device = if std::env::var_os("CHECKPOINTING").is_some() {
        Device::flex().autodiff().gradient_checkpointing()
    } else {
        Device::flex().autodiff()
    };
    let model = Pretrained::load(agentfly_model::io::smollm2::DEFAULT_MODEL, &device).unwrap();
    let vocab = model.config.vocab_size as u32;
    let seqs: Vec<Vec<u32>> = (0..batch)
        .map(|b| {
            (0..seq as u32)
                .map(|t| 100 + (t * 7919 + b as u32 * 104729) % (vocab - 100))
                .collect()
        })
        .collect();
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let packed = Packed::new(&refs, &device);
    let n = batch * (seq - 1);
    let weights: Tensor<2> = Tensor::from_data(
        TensorData::new(vec![1.0 / n as f32; n], [batch, seq - 1]),
        &device,
    );
    let config = OptimConfig {
        lr: 1e-6,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let mut optim = config.init();
    let mut decoder = model.decoder.clone();
    if std::env::var_os("BF16").is_some() || std::env::var_os("DITHERED").is_some() {
        decoder.dither_for_bf16(0xbf16);
    }
    if std::env::var_os("BF16").is_some() {
        assert!(decoder.use_bf16_products(true), "no AMX here");
    }
    for _ in 0..steps {
        let t = Instant::now();
        let loss = if std::env::var_os("TRUNK_ONLY").is_some() {
            decoder
                .causal_hidden(packed.ids.clone(), &model.rope)
                .mean()
        } else {
            let (lp, _) = token_logprobs(&decoder, &model.rope, packed.ids.clone(), false);
            sft_loss(lp, weights.clone())
        };
        let value = loss.clone().into_scalar::<f32>();
        let forward = t.elapsed().as_secs_f64();
        let mut grads = GradientsParams::from_grads(loss.backward(), &decoder);
        let backward = t.elapsed().as_secs_f64() - forward;
        clip_grad_norm(&decoder, &mut grads, 1.0);
        decoder = optim.step(config.lr, decoder, grads);
        let _ = decoder.norm.weight.val().into_data();
        let total = t.elapsed().as_secs_f64();
        println!(
            "loss {value:.3}: forward {forward:.2}s backward {backward:.2}s total {total:.2}s ({:.0} tok/s)",
            (batch * seq) as f64 / total
        );
    }
}
