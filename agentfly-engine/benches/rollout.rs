//! Rollout throughput of SmolLM2-135M on the calculator task — or, with
//! `AGENTFLY_BENCH_TASK=wiki`, on the wiki-qa questions with `search` and `retrieve` over
//! the real corpus (longer chains: retrieved text in context) — with one worked example in
//! the prompt, so the model calls the tools, and 1, 8 and 32 concurrent chains: trajectories/s,
//! sampled tokens/s, peak resident memory, and where the time went — the engine's busy
//! share of the wall time, the chains running on average against the engine's decode batch
//! (per step and over the decode time) and the requests waiting to join it, and each
//! chain's time split into waiting for generation, tools and the rest. Each run, agentfly's
//! and the peer's, is a process of its own. The peer
//! is a transformers agent loop (batched `model.generate` per round) on the same weights,
//! prompts and greedy decoding, in the same run.
//!
//! ```sh
//! scripts/setup && cargo run --release -- fetch-model   # the transformers peer; the SmolLM2 GGUF
//! cargo bench -p agentfly-engine --bench rollout
//! AGENTFLY_BENCH_TASK=wiki cargo bench -p agentfly-engine --bench rollout   # after agentfly fetch-corpus
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
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_model::Pretrained;
use burn::tensor::Device;
use serde_json::json;
use std::path::Path;

use agentfly_testdata::bench as common;

// As in the `agentfly` binary: freed memory is kept for the next step
// (agentfly_model::alloc); `main` calls `retain_freed_memory` first.
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

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
            .demonstration(&index, wiki_qa::write::DemoFormat::Hermes)
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

/// One run's figures (a child process's JSON).
struct Measured {
    trajectories: f64,
    sampled: f64,
    wall: f64,
    engine_busy: f64,
    mean_batch: f64,
    mean_batch_over_time: f64,
    mean_waiting: f64,
    chain_generate: f64,
    chain_tools: f64,
    chain_total: f64,
    peak_bytes: f64,
}

impl Measured {
    fn of(json: &serde_json::Value) -> Self {
        let f = |key: &str| json[key].as_f64().unwrap_or(f64::NAN);
        Self {
            trajectories: f("trajectories"),
            sampled: f("sampled"),
            wall: f("wall"),
            engine_busy: f("engine_busy"),
            mean_batch: f("mean_batch"),
            mean_batch_over_time: f("mean_batch_over_time"),
            mean_waiting: f("mean_waiting"),
            chain_generate: f("chain_generate"),
            chain_tools: f("chain_tools"),
            chain_total: f("chain_total"),
            peak_bytes: f("peak_bytes"),
        }
    }
}

fn task() -> Task {
    let n = RUNS.iter().map(|r| r.1).max().unwrap_or(0);
    match std::env::var("AGENTFLY_BENCH_TASK").as_deref() {
        Ok("wiki") => Task::wiki(n),
        Ok("calculator") | Err(_) => Task::calculator(n),
        Ok(other) => panic!("AGENTFLY_BENCH_TASK={other}: `calculator` or `wiki`"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    agentfly_model::alloc::retain_freed_memory();
    let task = task();
    if let Some(i) = args.iter().position(|a| a == "--run") {
        let (c, n) = args[i + 1].split_once(':').expect("C:N");
        let run = (c.parse().expect("chains"), n.parse().expect("samples"));
        println!("{}", measure_run(&task, run));
        return;
    }
    let repo = common::repo();
    let hf_dir = common::smollm2_hf_dir();
    let data_path = repo.join(format!("target/bench/rollout-{}-data.jsonl", task.name));
    let system_path = repo.join(format!("target/bench/rollout-{}-system.txt", task.name));
    data::write_jsonl(&data_path, &task.samples).expect("write the bench data");
    std::fs::write(&system_path, task.system).expect("write the system prompt");

    // Each run, agentfly's and the peer's, in a process of its own: its peak resident
    // memory is its own, and it starts with nothing cached.
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let mut rows = Vec::new();
    for (concurrency, n) in RUNS {
        eprintln!("agentfly: {n} samples, {concurrency} concurrent chains ...");
        let ours = Measured::of(&common::run_child(&[
            "--run",
            &format!("{concurrency}:{n}"),
        ]));
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
                format!("{concurrency}:{n}"),
                "--max-turns".into(),
                task.max_turns.to_string(),
                "--max-new-tokens".into(),
                task.max_new.to_string(),
            ]
            .into_iter()
            .chain(task.peer_args.iter().cloned())
            .collect::<Vec<_>>(),
        );
        rows.push((concurrency, n, ours, peer));
    }

    println!(
        "\n## Rollout: SmolLM2-135M-Instruct, {} task, greedy, CPU\n",
        task.name
    );
    println!(
        "| chains at once | samples | agentfly traj/s | agentfly sampled tok/s | transformers traj/s | transformers sampled tok/s | ratio (traj/s) | agentfly peak GB | transformers peak GB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (concurrency, n, m, peer) in &rows {
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
        let traj = m.trajectories / m.wall;
        let peer_peak = peer
            .as_ref()
            .and_then(|p| p["peak_bytes"].as_f64())
            .map_or("n/a".into(), |b| format!("{:.1}", b / 1e9));
        println!(
            "| {concurrency} | {n} | {traj:.2} | {:.1} | {ttraj:.2} | {ttok:.1} | {:.2}× | {:.1} | {peer_peak} |",
            m.sampled / m.wall,
            traj / ttraj,
            m.peak_bytes / 1e9,
        );
    }
    // Chains running on average: their summed seconds over the wall. With nothing waiting
    // to join, a decode batch below it is the chains' own time in prefill and tools.
    println!(
        "\n| chains at once | engine busy (share of wall) | mean chains running | mean decode batch: per step | over time | mean requests waiting to join | chain time: generation | tools | other |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (concurrency, _, m, _) in &rows {
        let other = (m.chain_total - m.chain_generate - m.chain_tools).max(0.0);
        println!(
            "| {concurrency} | {:.0}% | {:.1} | {:.1} | {:.1} | {:.2} | {:.1}% | {:.2}% | {:.2}% |",
            100.0 * m.engine_busy / m.wall,
            m.chain_total / m.wall,
            m.mean_batch,
            m.mean_batch_over_time,
            m.mean_waiting,
            100.0 * m.chain_generate / m.chain_total,
            100.0 * m.chain_tools / m.chain_total,
            100.0 * other / m.chain_total,
        );
    }
    if let Some(p) = rows.iter().find_map(|r| r.3.as_ref()) {
        println!("\npeer: torch {} with {} threads", p["torch"], p["threads"]);
    }
}

/// One run in this process: `n` samples at `concurrency` chains on a fresh engine; its
/// figures and the process's peak resident memory, as JSON.
fn measure_run(task: &Task, (concurrency, n): (usize, usize)) -> serde_json::Value {
    let model = Pretrained::load(common::smollm2_gguf(), &Device::flex()).expect("load SmolLM2");
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
    let out = runtime.block_on(rollout.run(&task.samples[..n], |_| {}));
    let stats = engine.stats();
    let s = &out.summary;
    eprintln!("{s}");
    json!({
        "trajectories": s.trajectories,
        "sampled": s.sampled_tokens,
        "wall": s.wall_seconds,
        "engine_busy": stats.busy_seconds(),
        "mean_batch": stats.mean_batch(),
        "mean_batch_over_time": stats.mean_batch_over_time(),
        "mean_waiting": stats.mean_waiting(),
        "chain_generate": s.generate_seconds,
        "chain_tools": s.tool_seconds,
        "chain_total": out.trajectories.iter().map(|t| t.seconds).sum::<f64>(),
        "peak_bytes": common::peak_bytes(),
    })
}
