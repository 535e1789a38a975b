//! The generation engine on the tiny Qwen2 fixture: requests that arrive at different
//! times, join a running batch and leave it at different steps give exactly what
//! generating each alone gives; bad requests fail alone; abandoned requests leave the
//! batch; model tasks run between batches.

mod common;

use agentfly_core::rollout::{GenerateRequest, GenerationEnd, Policy};
use agentfly_trainer::Pretrained;
use agentfly_trainer::engine::{Engine, EngineConfig};
use agentfly_trainer::generate::{SamplingParams, generate};
use std::sync::Arc;
use std::time::Duration;

fn load() -> Pretrained {
    Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap()
}

fn request(
    context: Vec<u32>,
    max_new_tokens: usize,
    temperature: f32,
    seed: u64,
) -> GenerateRequest {
    GenerateRequest {
        context,
        max_new_tokens,
        stop_ids: vec![7],
        stop_strings: Vec::new(),
        temperature,
        top_p: 1.0,
        top_k: 0,
        seed,
    }
}

/// What `generate` gives for the request alone.
fn alone(model: &Pretrained, r: &GenerateRequest) -> (Vec<u32>, Vec<f32>) {
    let params = SamplingParams {
        max_new_tokens: r.max_new_tokens,
        temperature: r.temperature,
        top_k: r.top_k,
        top_p: r.top_p,
        seed: r.seed,
        stop_ids: r.stop_ids.clone(),
        ..SamplingParams::default()
    };
    let out = generate(model, std::slice::from_ref(&r.context), &params, None).unwrap();
    (out[0].new_ids.clone(), out[0].logprobs.clone())
}

fn requests() -> Vec<GenerateRequest> {
    (0..24u32)
        .map(|i| {
            let len = 3 + (i as usize * 7) % 29;
            let context = (0..len as u32)
                .map(|t| 11 + (t * 13 + i * 5) % 480)
                .collect();
            let temperature = if i % 3 == 0 { 0.0 } else { 0.9 };
            request(
                context,
                4 + (i as usize * 5) % 23,
                temperature,
                1000 + u64::from(i),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staggered_requests_in_a_continuous_batch_equal_generating_each_alone() {
    let model = load();
    let requests = requests();
    let expected: Vec<_> = requests.iter().map(|r| alone(&model, r)).collect();
    let engine = Arc::new(Engine::start(
        model,
        EngineConfig {
            max_batch: 8,
            ..EngineConfig::default()
        },
    ));
    let mut tasks = Vec::new();
    for (i, r) in requests.into_iter().enumerate() {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            // Arrive while others are mid-sequence.
            tokio::time::sleep(Duration::from_millis((i as u64 * 3) % 17)).await;
            engine.generate(r).await.unwrap()
        }));
    }
    for (i, (task, (ids, logprobs))) in tasks.into_iter().zip(expected).enumerate() {
        let got = task.await.unwrap();
        assert_eq!(got.ids, ids, "request {i}");
        for (a, b) in got.logprobs.iter().zip(&logprobs) {
            assert!((a - b).abs() < 1e-4, "request {i}: logprob {a} vs {b}");
        }
        let stopped = ids.last() == Some(&7) || ids.len() < 4 + (i * 5) % 23;
        assert_eq!(got.end == GenerationEnd::Stop, stopped, "request {i}");
    }
    let stats = engine.stats();
    assert_eq!(stats.requests, 24);
    assert!(
        stats.prefills > 1,
        "requests joined a running batch: {stats:?}"
    );
    assert!(stats.mean_batch() > 1.5, "requests were batched: {stats:?}");
    assert!(stats.mean_batch() <= 8.0, "max_batch holds: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_fails_alone() {
    let engine = Engine::start(load(), EngineConfig::default());
    let good = request(vec![5, 6, 7, 8], 5, 0.0, 1);
    let too_long = request(vec![3; engine.max_context() + 1], 5, 0.0, 1);
    let (a, b, c) = tokio::join!(
        engine.generate(good.clone()),
        engine.generate(request(Vec::new(), 5, 0.0, 1)),
        engine.generate(too_long),
    );
    assert_eq!(a.unwrap().ids.len(), alone(&load(), &good).0.len());
    assert!(b.unwrap_err().to_string().contains("empty"));
    assert!(
        c.unwrap_err()
            .to_string()
            .contains("more than the model's context")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_request_leaves_the_batch() {
    let engine = Engine::start(load(), EngineConfig::default());
    let long = GenerateRequest {
        stop_ids: Vec::new(),
        ..request(vec![5, 6, 7, 8], 200, 0.0, 1)
    };
    let gave_up = tokio::time::timeout(Duration::from_millis(1), engine.generate(long)).await;
    assert!(gave_up.is_err(), "the long request is still running");
    // The next request is served; the abandoned one was dropped, not finished.
    engine
        .generate(request(vec![9, 10], 3, 0.0, 2))
        .await
        .unwrap();
    let stats = engine.stats();
    assert_eq!(stats.abandoned, 1, "{stats:?}");
    assert_eq!(stats.requests, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_tasks_run_between_batches_and_change_what_is_generated() {
    let engine = Arc::new(Engine::start(load(), EngineConfig::default()));
    let r = request(vec![5, 6, 7, 8, 9], 6, 0.0, 1);
    let before = engine.generate(r.clone()).await.unwrap();
    // A running request finishes under the old weights before the task runs.
    let running = {
        let engine = engine.clone();
        let r = r.clone();
        tokio::spawn(async move { engine.generate(r).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    let updater = engine.clone();
    let layers = tokio::task::spawn_blocking(move || {
        updater
            .with_model(|model| {
                // New "weights": a scaled output norm changes every logit.
                let w = model.decoder.norm.weight.val() * 3.0;
                model.decoder.norm.weight = burn::module::Param::from_tensor(w);
                model.config.num_hidden_layers
            })
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(layers, 2);
    assert_eq!(running.await.unwrap().ids, before.ids);
    let after = engine.generate(r).await.unwrap();
    assert_ne!(
        after.logprobs, before.logprobs,
        "requests after the task see the new weights"
    );
}
