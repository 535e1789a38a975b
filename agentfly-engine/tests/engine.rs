//! The generation engine on the tiny Qwen2 fixture: requests that arrive at different
//! times, join a running batch and leave it at different steps give exactly what
//! generating each alone gives; bad requests fail alone; abandoned requests leave the
//! batch; model tasks run between batches.

use agentfly_testdata::support as common;

use agentfly_core::rollout::{GenerateRequest, GenerationEnd, Policy};
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_engine::generate::{SamplingParams, generate};
use agentfly_model::Pretrained;
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
async fn requests_past_the_batch_limit_are_counted_as_waiting() {
    let engine = Engine::start(
        load(),
        EngineConfig {
            max_batch: 1,
            ..EngineConfig::default()
        },
    );
    // Sent together (a request is queued when `generate` is called): one decodes, two wait.
    let r = |seed| request((5..29).collect(), 6, 0.9, seed);
    let (a, b, c) = (
        engine.generate(r(1)),
        engine.generate(r(2)),
        engine.generate(r(3)),
    );
    let done = futures_util::future::join_all([a, b, c]).await;
    assert!(done.iter().all(Result::is_ok));
    let stats = engine.stats();
    assert!(stats.mean_batch() <= 1.0, "{stats:?}");
    assert!(
        (stats.mean_batch_over_time() - 1.0).abs() < 1e-9,
        "{stats:?}"
    );
    // Each step of the first sequence had two behind it, each of the second's one.
    assert!(stats.waiting_rows >= 3, "{stats:?}");
    assert_eq!(
        stats.mean_waiting(),
        stats.waiting_rows as f64 / stats.steps as f64
    );
    let alone = Engine::start(load(), EngineConfig::default());
    alone.generate(r(1)).await.unwrap();
    assert_eq!(alone.stats().waiting_rows, 0);
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
    // Long enough for the prefix cache.
    let r = request((5..29).collect(), 6, 0.0, 1);
    let before = engine.generate(r.clone()).await.unwrap();
    // A running request finishes under the old weights before the task runs.
    let running = {
        let engine = engine.clone();
        let r = r.clone();
        tokio::spawn(async move { engine.generate(r).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    let updater = engine.clone();
    // New "weights" that change every key and value: a stale prefix cache would show.
    let change = |model: &mut Pretrained| {
        let qkv = &mut model.decoder.blocks[0].attention.qkv;
        qkv.weight = burn::module::Param::from_tensor(qkv.weight.val() * 1.5);
    };
    let layers = tokio::task::spawn_blocking(move || {
        updater
            .with_model(move |model| {
                change(model);
                model.config.num_hidden_layers
            })
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(layers, 2);
    assert_eq!(running.await.unwrap().ids, before.ids);
    let after = engine.generate(r.clone()).await.unwrap();
    let mut changed = load();
    change(&mut changed);
    let (ids, logprobs) = alone(&changed, &r);
    assert_eq!(after.ids, ids);
    for (x, y) in after.logprobs.iter().zip(&logprobs) {
        assert!(
            (x - y).abs() < 1e-4,
            "requests after the task see the new weights: {x} vs {y}"
        );
    }
    assert_ne!(after.logprobs, before.logprobs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_weights_refuse_requests_until_new_ones_load() {
    let engine = Arc::new(Engine::start(load(), EngineConfig::default()));
    let r = request((5..29).collect(), 6, 0.0, 1);
    let before = engine.generate(r.clone()).await.unwrap();
    let releaser = engine.clone();
    tokio::task::spawn_blocking(move || releaser.release_weights().unwrap())
        .await
        .unwrap();
    let refused = engine.generate(r.clone()).await.unwrap_err();
    assert!(refused.0.contains("released"), "{refused}");
    // The engine's model holds no weights now.
    let checker = engine.clone();
    let (blocks, embedded) = tokio::task::spawn_blocking(move || {
        checker
            .with_model(|model| {
                (
                    model.decoder.blocks.len(),
                    model.decoder.embed.val().dims()[0],
                )
            })
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!((blocks, embedded), (0, 0));
    let loader = engine.clone();
    tokio::task::spawn_blocking(move || loader.load_weights(load().decoder, 3).unwrap())
        .await
        .unwrap();
    let after = engine.generate(r).await.unwrap();
    assert_eq!(after.ids, before.ids);
    assert_eq!(after.logprobs, before.logprobs);
    assert_eq!(after.policy_version, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_prefixes_and_previous_turns_are_not_prefilled_again() {
    let model = load();
    let shared: Vec<u32> = (0..40).map(|t| 20 + (t * 11) % 400).collect();
    let with = |tail: &[u32]| [shared.as_slice(), tail].concat();
    let first = [
        request(with(&[5, 6, 7]), 8, 0.0, 1),
        request(with(&[9, 10]), 8, 0.8, 2),
    ];
    let expected: Vec<_> = first.iter().map(|r| alone(&model, r)).collect();
    let engine = Engine::start(model, EngineConfig::default());
    let a = engine.generate(first[0].clone()).await.unwrap();
    assert_eq!(a.ids, expected[0].0);
    // The second shares the first's 40-token prefix.
    let b = engine.generate(first[1].clone()).await.unwrap();
    assert_eq!(b.ids, expected[1].0);
    for (x, y) in b.logprobs.iter().zip(&expected[1].1) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
    let stats = engine.stats();
    assert_eq!(stats.prefix_hits, 1, "{stats:?}");
    assert!(stats.prefix_reused_tokens >= 40, "{stats:?}");
    // A next turn: the first context, what was generated, and an observation.
    let next = request(
        [first[0].context.clone(), a.ids.clone(), vec![30, 31, 32]].concat(),
        6,
        0.0,
        3,
    );
    let reference =
        Pretrained::load(common::fixtures().join("tiny-qwen2"), &common::device()).unwrap();
    let (ids, logprobs) = alone(&reference, &next);
    let got = engine.generate(next.clone()).await.unwrap();
    assert_eq!(got.ids, ids);
    for (x, y) in got.logprobs.iter().zip(&logprobs) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
    let after = engine.stats();
    assert_eq!(after.prefix_hits, 2, "{after:?}");
    let reused = after.prefix_reused_tokens - stats.prefix_reused_tokens;
    assert_eq!(
        reused as usize,
        first[0].context.len() + a.ids.len() - 1,
        "all of the previous turn but its last sampled id came from the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wait_on_the_engine_is_bounded_and_says_what_it_waited_for() {
    let engine = Arc::new(Engine::start(
        load(),
        EngineConfig {
            request_timeout: Duration::from_millis(200),
            task_timeout: Duration::from_millis(200),
            ..EngineConfig::default()
        },
    ));
    // A model task that holds the engine for a second (a stuck weight update).
    let stuck = {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || {
            engine.with_model(|_| std::thread::sleep(Duration::from_secs(1)))
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waited = engine.generate(request(vec![5, 6, 7, 8], 4, 0.0, 1)).await;
    let err = waited.unwrap_err().to_string();
    assert!(
        err.contains("no reply from the generation engine within 200ms")
            && err.contains("request_timeout"),
        "{err}"
    );
    let err = stuck.await.unwrap().unwrap_err().to_string();
    assert!(
        err.contains("did not run a model task") && err.contains("task_timeout"),
        "{err}"
    );
    // Once the task is over, the engine serves again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let served = engine.generate(request(vec![5, 6, 9, 8], 4, 0.0, 1)).await;
    assert!(served.is_ok(), "{served:?}");
    assert_eq!(
        engine.stats().abandoned,
        1,
        "the timed-out request left the queue"
    );
}
