//! Rollouts on Qwen3's tokenizer and template (fixtures) with a policy that reads its
//! context like a model would: hundreds of concurrent chains share a small pool of
//! stateful environments, each chain keeps its instance across turns, the results are
//! the same whatever order chains finish in, and the summary adds up.

mod common;

use agentfly_core::chat::Tokenizer;
use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::rollout::format::Hermes;
use agentfly_core::rollout::{
    ChainConfig, ChainEnd, ChainSetup, GenerateRequest, Generated, GenerationEnd, Policy,
    PolicyError, Rollout, RolloutOutput, chain_seed,
};
use agentfly_core::{Rewards, Sample, Toolbox, reward, tool};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A counter per chain; `default_env!` resets it for every chain.
#[derive(Default)]
struct Tally {
    value: i64,
}
agentfly_core::default_env!(Tally);

/// Adds one to the chain's tally and returns it.
#[tool(env = Tally)]
async fn tally_bump(tally: &mut Tally) -> String {
    tally.value += 1;
    // Hold the instance across an await, as real environments do.
    tokio::time::sleep(Duration::from_millis(1)).await;
    tally.value.to_string()
}

/// Submits the final answer.
#[tool(terminal)]
fn tally_submit(
    /// The answer.
    answer: String,
) -> String {
    format!("submitted {answer}")
}

/// 1 when the response is the sample's answer.
#[reward]
fn tally_right(response: &str, answer: String) -> f32 {
    f32::from(u8::from(response.trim() == answer))
}

/// Bumps the tally `1 + seed % 3` times (a "sampled" choice), then submits the last
/// value it saw; answers after random delays so chains finish out of order.
struct ReadingPolicy {
    tokenizer: Tokenizer,
    eot: u32,
    requests: AtomicUsize,
}

#[agentfly_core::async_trait]
impl Policy for ReadingPolicy {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let delay = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 3_000_000;
        tokio::time::sleep(Duration::from_nanos(u64::from(delay))).await;
        let text = self.tokenizer.decode(&request.context, false).unwrap();
        let responses: Vec<&str> = text
            .split("<tool_response>\n")
            .skip(1)
            .map(|s| s.split('\n').next().unwrap())
            .collect();
        // The seed is the same for every turn of a chain but its last digits.
        let wanted = 1 + (request.seed / 1_000_003 % 3) as usize;
        let out = if responses.len() < wanted {
            "<tool_call>\n{\"name\": \"tally_bump\", \"arguments\": {}}\n</tool_call>".to_string()
        } else {
            let last = responses.last().unwrap();
            format!(
                "<tool_call>\n{{\"name\": \"tally_submit\", \"arguments\": {{\"answer\": \"{last}\"}}}}\n</tool_call>"
            )
        };
        let mut ids = self.tokenizer.encode(&out, false).unwrap();
        ids.push(self.eot);
        Ok(Generated {
            logprobs: vec![-0.25; ids.len()],
            ids,
            end: GenerationEnd::Stop,
            policy_version: 0,
        })
    }
}

/// The number of bumps chain `c` of sample `i` makes under `seed`.
fn bumps(seed: u64, i: usize, c: usize) -> i64 {
    // The chain's first request has seed chain_seed * 1_000_003 + 0 (wrapping).
    let turn0 = chain_seed(seed, i, c).wrapping_mul(1_000_003);
    1 + (turn0 / 1_000_003 % 3) as i64
}

async fn roll(samples: &[Sample], seed: u64, capacity: usize) -> (RolloutOutput, EnvPools, usize) {
    let (tokenizer, template, eot) = common::qwen3();
    let policy = ReadingPolicy {
        tokenizer: tokenizer.clone(),
        eot,
        requests: AtomicUsize::new(0),
    };
    let toolbox = Toolbox::from_names(&["tally_bump", "tally_submit"]).unwrap();
    let rewards = Rewards::from_names(&["tally_right"]).unwrap();
    let config = ChainConfig::default();
    let pools = EnvPools::new(PoolConfig {
        capacity,
        lease_timeout: Duration::from_secs(60),
        ..PoolConfig::default()
    });
    let rollout = Rollout {
        setup: ChainSetup {
            policy: &policy,
            toolbox: &toolbox,
            format: &Hermes,
            template: &template,
            tokenizer: &tokenizer,
            end_of_turn: &[eot],
            rewards: Some((&rewards, "tally_right")),
            config: &config,
        },
        pools: pools.clone(),
        chains: 4,
        concurrency: 400,
        seed,
    };
    let mut seen = 0;
    let output = rollout.run(samples, |_| seen += 1).await;
    assert_eq!(seen, output.trajectories.len(), "on_done saw every chain");
    let requests = policy.requests.load(Ordering::SeqCst);
    (output, pools, requests)
}

fn samples(n: usize) -> Vec<Sample> {
    (0..n)
        .map(|i| {
            Sample::new(
                format!("s{i}"),
                json!({"question": format!("Count for me ({i})."), "answer": "3"}),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_concurrent_chains_share_a_small_env_pool() {
    let samples = samples(75);
    let (out, pools, requests) = roll(&samples, 11, 4).await;
    assert_eq!(out.trajectories.len(), 300);
    let mut answered_three = 0;
    for (k, t) in out.trajectories.iter().enumerate() {
        let (i, c) = (k / 4, k % 4);
        assert_eq!((t.sample_id.as_str(), t.chain), (samples[i].id.as_str(), c));
        assert_eq!(t.finish_reason, ChainEnd::Answered, "{:?}", t.error);
        // The chain kept one instance: its tally counted 1, 2, ... and was never
        // another chain's (a fresh reset per chain).
        let n = bumps(11, i, c);
        let seen: Vec<&str> = t
            .calls()
            .filter(|c| c.name == "tally_bump")
            .map(|c| c.observation.as_str())
            .collect();
        let expected: Vec<String> = (1..=n).map(|v| v.to_string()).collect();
        assert_eq!(seen, expected, "chain {c} of sample {i}");
        assert_eq!(t.response, n.to_string());
        assert_eq!(t.reward, Some(if n == 3 { 1.0 } else { 0.0 }));
        answered_three += usize::from(n == 3);
        assert_eq!(t.num_turns() as i64, n + 1);
    }
    let metrics = pools.metrics();
    let tally = metrics
        .iter()
        .find(|(name, _)| name.contains("Tally"))
        .map(|(_, m)| m.clone())
        .expect("a Tally pool");
    assert!(tally.created <= 4, "{tally:?}");
    assert_eq!(tally.leases, 300, "one lease per chain: {tally:?}");
    assert!(
        tally.waited > 0,
        "chains waited for the 4 instances: {tally:?}"
    );
    pools.close().await;

    let s = &out.summary;
    assert_eq!((s.samples, s.trajectories), (75, 300));
    let bumps_total: usize = out.trajectories.iter().map(|t| t.num_turns() - 1).sum();
    assert_eq!(s.calls_per_tool["tally_bump"], bumps_total);
    assert_eq!(s.calls_per_tool["tally_submit"], 300);
    assert_eq!(requests, bumps_total + 300);
    assert_eq!(s.finish_reasons["answered"], 300);
    assert_eq!(s.parse_errors, 0);
    let mean = answered_three as f64 / 300.0;
    assert!((s.reward_mean.unwrap() - mean).abs() < 1e-9);
    assert!(
        answered_three > 0 && answered_three < 300,
        "the seeds vary the chains"
    );
    let text = s.to_string();
    assert!(text.contains("trajectories   300 (75 samples)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_fixes_the_trajectories_whatever_order_chains_finish_in() {
    let samples = samples(12);
    let strip = |out: RolloutOutput| {
        out.trajectories
            .into_iter()
            .map(|t| (t.sample_id, t.chain, t.tokens, t.loss_mask, t.reward))
            .collect::<Vec<_>>()
    };
    let a = strip(roll(&samples, 5, 3).await.0);
    let b = strip(roll(&samples, 5, 3).await.0);
    let c = strip(roll(&samples, 6, 3).await.0);
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed, other choices");
}
