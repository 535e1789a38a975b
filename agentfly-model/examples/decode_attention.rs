//! How near the decode step's attention over the cache comes to the machine's memory
//! bandwidth, its limit: each sequence's new token against its cached keys and values over
//! SmolLM2-135M's 30 layers (3 key/value heads of 64, 3 query heads each; every layer's
//! own buffers, so they stream from memory as in a real step), at the batch sizes and
//! context lengths of the jobs' rollouts. The peer, measured in the same run, is the
//! machine's stream rate: a parallel sum over 1 GiB of f32 on every thread.
//!
//! `cargo run --release -p agentfly-model --example decode_attention`

use agentfly_model::model::decode_attention::attend;
use burn::tensor::{Device, Distribution, Tensor};
use rayon::prelude::*;
use std::time::Instant;

const LAYERS: usize = 30;
const KV_HEADS: usize = 3;
const GROUP: usize = 3;
const D: usize = 64;

/// The best of `reps` timings of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// A sum in sixteen lanes, which the compiler vectorises (a sum in order would be bound
/// by its chain of adds, not by memory).
fn lanes_sum(chunk: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    for c in chunk.chunks_exact(16) {
        for i in 0..16 {
            lanes[i] += c[i];
        }
    }
    lanes.iter().sum()
}

fn main() {
    let device = Device::flex();
    let stream: Vec<f32> = vec![1.0; 1 << 28];
    let stream_secs = best(5, || {
        let sum: f32 = stream.par_chunks(1 << 16).map(lanes_sum).sum();
        std::hint::black_box(sum);
    });
    let stream_rate = (stream.len() * 4) as f64 / stream_secs / 1e9;
    drop(stream);
    println!(
        "memory stream: {stream_rate:.1} GB/s ({} threads)\n",
        rayon::current_num_threads()
    );
    println!(
        "| rows | keys a row (mean) | ms per step (30 layers) | GB/s of keys and values | share of the stream rate |"
    );
    println!("|---:|---:|---:|---:|---:|");
    let normal = Distribution::Normal(0.0, 1.0);
    for (rows, keys) in [
        (1, 1200),
        (8, 192),
        (32, 192),
        (8, 1200),
        (16, 1200),
        (32, 1200),
    ] {
        // Lengths spread ±10% around the mean, as a batch's sequences are.
        let lengths: Vec<usize> = (0..rows)
            .map(|i| keys - keys / 10 + (i * keys / 5) / rows.max(1))
            .collect();
        let capacity = lengths.iter().max().copied().unwrap_or(keys) + 64;
        let shape = [rows, KV_HEADS, capacity, D];
        let layers: Vec<(Tensor<4>, Tensor<4>)> = (0..LAYERS)
            .map(|_| {
                let k = Tensor::<4>::random(shape, normal, &device);
                (k.clone() * 0.5, k)
            })
            .collect();
        let q = Tensor::<4>::random([rows, KV_HEADS, GROUP, D], normal, &device);
        let secs = best(5, || {
            for (k, v) in &layers {
                let out = attend(q.clone(), k.clone(), v.clone(), lengths.clone());
                std::hint::black_box(out);
            }
        });
        let bytes = lengths.iter().sum::<usize>() * KV_HEADS * D * 4 * 2 * LAYERS;
        let rate = bytes as f64 / secs / 1e9;
        println!(
            "| {rows} | {} | {:.1} | {rate:.1} | {:.0}% |",
            lengths.iter().sum::<usize>() / rows,
            secs * 1e3,
            100.0 * rate / stream_rate
        );
    }
}
