//! Greedy decoding of one batch with SmolLM2-135M-Instruct, for profilers: `rows` random
//! 64-token prompts (`AGENTFLY_PROMPT_LEN` tokens: a multi-turn chain's long context), `new` tokens each with EOS ignored; prints decode tokens per second
//! (the prefill's single-token run subtracted, as the generation bench does). With
//! `AGENTFLY_PACKED=1` the weights are packed first, as the engine does; with `BF16=1` as
//! well, in bf16 for AMX (`--bf16`).
//!
//! `perf record -g cargo run --release -p agentfly-engine --example decode_batch -- 32 128`

use agentfly_engine::generate::{SamplingParams, generate};
use agentfly_model::Pretrained;
use std::time::Instant;

#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn main() {
    agentfly_model::alloc::retain_freed_memory();
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let new: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let gguf = args
        .next()
        .unwrap_or_else(|| "models/SmolLM2-135M-Instruct.Q4_1.gguf".into());
    let device = agentfly_model::device::parse_device("cpu").expect("the CPU device");
    let mut model = Pretrained::load(std::path::Path::new(&gguf), &device)
        .unwrap_or_else(|e| panic!("{gguf}: {e} (run `agentfly fetch-model`)"));
    if std::env::var("BF16").as_deref() == Ok("1") {
        assert!(
            model.decoder.use_bf16_products(true),
            "BF16=1: this CPU or OS has no AMX"
        );
    }
    if std::env::var("AGENTFLY_PACKED").as_deref() == Ok("1") {
        model.decoder.pack_for_decode();
    }
    let vocab = model.config.vocab_size as u32;
    let prompt_len: u32 = std::env::var("AGENTFLY_PROMPT_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let prompts: Vec<Vec<u32>> = (0..rows as u32)
        .map(|r| {
            (0..prompt_len)
                .map(|i| 100 + (r * 7919 + i * 104_729) % (vocab - 100))
                .collect()
        })
        .collect();
    let run = |tokens: usize| {
        let params = SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(tokens)
        };
        let start = Instant::now();
        generate(&model, &prompts, &params, None).expect("prompts fit the context");
        start.elapsed().as_secs_f64()
    };
    let first = run(1);
    let all = run(new);
    if std::env::var("AGENTFLY_VERBOSE").as_deref() == Ok("1") {
        println!("prefill and one token: {first:.3} s; {new} tokens: {all:.3} s");
    }
    println!(
        "batch {rows}: {:.1} decode tok/s ({:.1} ms per step)",
        rows as f64 * (new - 1) as f64 / (all - first),
        (all - first) / (new - 1) as f64 * 1e3
    );
}
