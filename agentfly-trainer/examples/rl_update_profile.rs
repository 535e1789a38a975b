//! One RL update on real trajectories, timed: the rows of an evaluation file written by a
//! job (`evals/final.json`: each trajectory's tokens and loss mask), the first `rows` of them
//! with ±1 advantages, updated as a run's trainer does (GRPO's single optimizer step, the
//! training device with its checkpointing): each micro-batch's rows padded to the longest
//! or packed end to end (the default), without sharing the rows' common prefix and with it
//! (the default), and the default with the reference model's pass that `train.track_kl`
//! adds. The variants take turns, run by run, so that a busy machine slows them alike.
//! With `BF16=1`, as `[model] bf16` trains: the products in bf16 on AMX, the weights dithered.
//! `cargo run --release -p agentfly-trainer --example rl_update_profile -- target/runs/wiki-qa-r4/code/evals/final.json 40 2`

use agentfly_model::Pretrained;
use agentfly_trainer::train::{
    Actor, OptimConfig, PolicyRow, Reference, TrainSection, pack_rows, policy_update,
    share_prefixes,
};
use std::time::Instant;

#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn main() {
    agentfly_model::alloc::retain_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args.first().expect("an evaluation file (evals/final.json)");
    let count: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(40);
    let runs: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let eval: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json");
    let rows: Vec<PolicyRow> = eval["trajectories"]
        .as_array()
        .expect("trajectories")
        .iter()
        .take(count)
        .enumerate()
        .map(|(i, t)| {
            let tokens: Vec<u32> = serde_json::from_value(t["tokens"].clone()).expect("tokens");
            let mask: Vec<f32> = serde_json::from_value(t["loss_mask"].clone()).expect("mask");
            let advantage = if i % 2 == 0 { 1.0 } else { -1.0 };
            PolicyRow {
                advantages: vec![advantage; tokens.len()],
                tokens,
                mask,
                ..PolicyRow::default()
            }
        })
        .collect();
    let tokens: usize = rows.iter().map(|r| r.tokens.len()).sum();
    let learned: f32 = rows.iter().map(|r| r.mask.iter().sum::<f32>()).sum();
    println!(
        "{} rows, {tokens} tokens ({:.0} learned), longest {}",
        rows.len(),
        learned,
        rows.iter().map(|r| r.tokens.len()).max().unwrap_or(0)
    );

    let section = TrainSection::default();
    let device = agentfly_model::device::parse_device("cpu").expect("cpu");
    let train_device =
        agentfly_model::device::training(device.clone(), section.gradient_checkpointing);
    let bf16 = std::env::var_os("BF16").is_some();
    let load = |device| {
        let mut model = Pretrained::load(agentfly_model::io::smollm2::DEFAULT_MODEL, device)
            .expect("load SmolLM2");
        if bf16 {
            assert!(model.decoder.use_bf16_products(true), "no AMX here");
            model.decoder.dither_for_bf16(0xbf16);
        }
        model
    };
    let model = load(&train_device);
    let reference = Reference {
        decoder: load(&device).decoder,
    };
    let config = OptimConfig {
        lr: 1e-6,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), config, 100);
    let variants = [
        (false, false, false),
        (false, true, false),
        (true, false, false),
        (true, true, false),
        (true, true, true),
    ];
    let mut seconds = vec![Vec::new(); variants.len()];
    for run in 0..runs {
        for (v, &(share, pack, with_reference)) in variants.iter().enumerate() {
            share_prefixes(share);
            pack_rows(pack);
            let section = TrainSection {
                track_kl: with_reference,
                ..section.clone()
            };
            let start = Instant::now();
            let report = policy_update(
                &mut actor,
                &mut None,
                with_reference.then_some(&reference),
                &rows,
                &section,
                0,
            );
            let _ = actor.decoder().norm.weight.val().into_data();
            let took = start.elapsed().as_secs_f64();
            seconds[v].push(took);
            println!(
                "shared prefix {share}, packed {pack}, reference {with_reference}, run {run}: {took:.1} s, {:.0} tok/s ({} micro-batches, {} computed positions of which {} padding, kl {:.2e})",
                tokens as f64 / took,
                report.micro_batches,
                report.computed_tokens,
                report.padded_tokens,
                report.kl
            );
        }
    }
    println!("median seconds per update:");
    for ((share, pack, with_reference), mut s) in variants.into_iter().zip(seconds) {
        s.sort_by(f64::total_cmp);
        println!(
            "  shared prefix {share}, packed {pack}, reference {with_reference}: {:.2} s",
            s[s.len() / 2]
        );
    }
}
