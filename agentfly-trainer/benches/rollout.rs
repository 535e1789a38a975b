//! Rollout throughput of SmolLM2-135M on the calculator task — or, with
//! `AGENTFLY_BENCH_TASK=wiki`, on the wiki-qa questions with `search` and `retrieve` over
//! the real corpus (longer chains: retrieved text in context) — with one worked example in
//! the prompt, so the model calls the tools, and 1, 8 and 32 concurrent chains: trajectories/s,
//! sampled tokens/s, and where the time went — the engine's busy share of the wall time,
//! and each chain's time split into waiting for generation, tools and the rest. The peer
//! is a transformers agent loop (batched `model.generate` per round) on the same weights,
//! prompts and greedy decoding, in the same run.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-trainer --bench rollout
//! AGENTFLY_BENCH_TASK=wiki cargo bench -p agentfly-trainer --bench rollout   # after agentfly fetch-corpus
//! ```
//!
//! The wiki peer's tools are the same corpus in Python: SQLite FTS5 BM25 for `search`, a
//! dictionary for `retrieve` (`scripts/bench/transformers_rollout.py --corpus`).
//!
//! Environment: `AGENTFLY_PYTHON` (default `.venv-bench/bin/python`).

use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::rollout::format::Hermes;
use agentfly_core::rollout::{ChainConfig, ChainSetup, Rollout};
use agentfly_core::{Sample, Toolbox, data};
use agentfly_trainer::Pretrained;
use agentfly_trainer::engine::{Engine, EngineConfig};
use burn::tensor::Device;
use serde_json::json;
use std::path::Path;

mod common;

agentfly_core::link!(agentfly_tools);

const SYSTEM: &str = "You solve arithmetic problems with tools. Call a tool by writing \
<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2 + 3 * 4\"}}</tool_call>. \
When you know the answer, submit it with \
<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"14\"}}</tool_call>.";
const WIKI_SYSTEM: &str = "You answer questions about an encyclopedia with its tools. Find \
articles with <tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"keywords\"}}</tool_call>, \
read one with <tool_call>{\"name\": \"retrieve\", \"arguments\": {\"title\": \"Exact title\"}}</tool_call>, \
and submit the answer alone with \
<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"1991\"}}</tool_call>.";

/// The task the bench rolls out.
struct Task {
    name: &'static str,
    system: &'static str,
    tools: &'static [&'static str],
    max_turns: usize,
    max_new: usize,
    samples: Vec<Sample>,
    /// Extra arguments of the peer.
    peer_args: Vec<String>,
}

impl Task {
    fn calculator(n: usize) -> Self {
        Task {
            name: "calculator",
            system: SYSTEM,
            tools: &["calculator", "submit_answer"],
            max_turns: 3,
            max_new: 48,
            samples: samples(n),
            peer_args: Vec::new(),
        }
    }

    /// The wiki-qa test questions of seed 0, after one worked example (retrieve, submit).
    fn wiki(n: usize) -> Self {
        use agentfly_envs::wiki::WikiIndex;
        use agentfly_tools::tasks::{arithmetic::SplitSizes, wiki_qa};
        let path = agentfly_testdata::wiki_corpus();
        let cache = common::repo().join("target/bench/wiki");
        let index = WikiIndex::open_or_build(&path, &cache).expect("the index");
        agentfly_tools::wiki::install(index.clone());
        let sizes = SplitSizes {
            train: 0,
            val: 0,
            test: n,
            demos: 1,
        };
        let splits = wiki_qa::splits(&index, 0, sizes).expect("questions");
        let shot = &splits.demos[0];
        let demo = shot
            .demonstration(&index, wiki_qa::DemoFormat::Hermes)
            .expect("the article is in the corpus");
        let mut shot_messages = demo.field("messages").unwrap().as_array().unwrap().clone();
        shot_messages.push(json!({"role": "tool", "name": "submit_answer", "content": format!("Answer submitted: {}", shot.answer)}));
        let samples = splits
            .test
            .iter()
            .map(|q| {
                let mut messages = shot_messages.clone();
                messages.push(json!({"role": "user", "content": q.question}));
                Sample::new(
                    q.id.clone(),
                    json!({"messages": messages, "answer": q.answer}),
                )
            })
            .collect();
        Task {
            name: "wiki-qa",
            system: WIKI_SYSTEM,
            tools: &["search", "retrieve", "submit_answer"],
            max_turns: 4,
            max_new: 64,
            samples,
            peer_args: vec!["--corpus".into(), path.to_string_lossy().into_owned()],
        }
    }
}
/// (concurrent chains, samples).
const RUNS: [(usize, usize); 3] = [(1, 12), (8, 32), (32, 64)];

fn samples(n: usize) -> Vec<Sample> {
    let shot = [
        json!({"role": "user", "content": "What is 17 * 3?"}),
        json!({"role": "assistant", "content": "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 3\"}}</tool_call>"}),
        json!({"role": "tool", "name": "calculator", "content": "51"}),
        json!({"role": "assistant", "content": "<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"51\"}}</tool_call>"}),
        json!({"role": "tool", "name": "submit_answer", "content": "Answer submitted: 51"}),
    ];
    (0..n)
        .map(|i| {
            let (a, b) = (100 + (i * 37) % 900, 10 + (i * 53) % 90);
            let (q, answer) = match i % 3 {
                0 => (format!("What is {a} * {b}?"), a * b),
                1 => (format!("What is {a} + {b}?"), a + b),
                _ => (
                    format!("Each box holds {b} pens. How many pens are in {a} boxes?"),
                    a * b,
                ),
            };
            let mut messages = shot.to_vec();
            messages.push(json!({"role": "user", "content": q}));
            Sample::new(
                format!("q{i}"),
                json!({"messages": messages, "answer": answer}),
            )
        })
        .collect()
}

struct Measured {
    trajectories: usize,
    sampled: usize,
    wall: f64,
    engine_busy: f64,
    mean_batch: f64,
    chain_generate: f64,
    chain_tools: f64,
    chain_total: f64,
}

fn main() {
    agentfly_trainer::alloc::retain_freed_memory();
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let repo = common::repo();
    let model = Pretrained::load(common::smollm2_gguf(), &Device::flex()).expect("load SmolLM2");
    let hf_dir = common::smollm2_hf_dir();
    let n = RUNS.iter().map(|r| r.1).max().unwrap_or(0);
    let task = match std::env::var("AGENTFLY_BENCH_TASK").as_deref() {
        Ok("wiki") => Task::wiki(n),
        Ok("calculator") | Err(_) => Task::calculator(n),
        Ok(other) => panic!("AGENTFLY_BENCH_TASK={other}: `calculator` or `wiki`"),
    };
    let all = &task.samples;
    let data_path = repo.join(format!("target/bench/rollout-{}-data.jsonl", task.name));
    let system_path = repo.join(format!("target/bench/rollout-{}-system.txt", task.name));
    data::write_jsonl(&data_path, all).expect("write the bench data");
    std::fs::write(&system_path, task.system).expect("write the system prompt");

    let (tokenizer, template, eos) = model.chat_parts().expect("a chat model");
    let engine = Engine::start(model, EngineConfig::default());
    let toolbox = Toolbox::from_names(task.tools).unwrap();
    let config = ChainConfig {
        max_turns: task.max_turns,
        max_tokens_per_turn: task.max_new,
        system_prompt: task.system.into(),
        temperature: 0.0,
        ..ChainConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut ours = Vec::new();
    for (concurrency, n) in RUNS {
        eprintln!("agentfly: {n} samples, {concurrency} concurrent chains ...");
        let rollout = Rollout {
            setup: ChainSetup {
                policy: &engine,
                toolbox: &toolbox,
                format: &Hermes,
                template: &template,
                tokenizer: &tokenizer,
                end_of_turn: &eos,
                rewards: None,
                config: &config,
            },
            pools: EnvPools::new(PoolConfig::default()),
            chains: 1,
            concurrency,
            seed: 0,
        };
        let before = engine.stats();
        let out = runtime.block_on(rollout.run(&all[..n], |_| {}));
        let after = engine.stats();
        let s = &out.summary;
        ours.push(Measured {
            trajectories: s.trajectories,
            sampled: s.sampled_tokens,
            wall: s.wall_seconds,
            engine_busy: after.busy_seconds() - before.busy_seconds(),
            mean_batch: (after.rows - before.rows) as f64
                / (after.steps - before.steps).max(1) as f64,
            chain_generate: s.generate_seconds,
            chain_tools: s.tool_seconds,
            chain_total: out.trajectories.iter().map(|t| t.seconds).sum(),
        });
        eprintln!("{s}");
    }
    drop(engine);

    let runs = RUNS
        .iter()
        .map(|(c, n)| format!("{c}:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let peer = common::run_peer(
        "transformers_rollout.py",
        &[
            "--model".into(),
            path(&hf_dir),
            "--data".into(),
            path(&data_path),
            "--system".into(),
            path(&system_path),
            "--runs".into(),
            runs,
            "--max-turns".into(),
            task.max_turns.to_string(),
            "--max-new-tokens".into(),
            task.max_new.to_string(),
        ]
        .into_iter()
        .chain(task.peer_args.iter().cloned())
        .collect::<Vec<_>>(),
    );

    println!(
        "\n## Rollout: SmolLM2-135M-Instruct, {} task, greedy, CPU\n",
        task.name
    );
    println!(
        "| chains at once | samples | agentfly traj/s | agentfly sampled tok/s | transformers traj/s | transformers sampled tok/s | ratio (traj/s) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for ((concurrency, n), m) in RUNS.iter().zip(&ours) {
        let theirs = peer
            .as_ref()
            .and_then(|p| p["runs"].get(concurrency.to_string()));
        let (ttraj, ttok) = match theirs {
            Some(t) => {
                let wall = t["wall_seconds"].as_f64().unwrap_or(f64::NAN);
                (
                    t["trajectories"].as_f64().unwrap_or(f64::NAN) / wall,
                    t["sampled_tokens"].as_f64().unwrap_or(f64::NAN) / wall,
                )
            }
            None => (f64::NAN, f64::NAN),
        };
        let traj = m.trajectories as f64 / m.wall;
        println!(
            "| {concurrency} | {n} | {traj:.2} | {:.1} | {ttraj:.2} | {ttok:.1} | {:.2}× |",
            m.sampled as f64 / m.wall,
            traj / ttraj
        );
    }
    println!(
        "\n| chains at once | engine busy (share of wall) | mean decode batch | chain time: generation | tools | other |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for ((concurrency, _), m) in RUNS.iter().zip(&ours) {
        let other = (m.chain_total - m.chain_generate - m.chain_tools).max(0.0);
        println!(
            "| {concurrency} | {:.0}% | {:.1} | {:.1}% | {:.2}% | {:.2}% |",
            100.0 * m.engine_busy / m.wall,
            m.mean_batch,
            100.0 * m.chain_generate / m.chain_total,
            100.0 * m.chain_tools / m.chain_total,
            100.0 * other / m.chain_total,
        );
    }
    if let Some(p) = &peer {
        println!("\npeer: torch {} with {} threads", p["torch"], p["threads"]);
    }
}
