//! Search latency and throughput under concurrent chains: the `search` tool (BM25 over the
//! wiki corpus, tantivy) called through the toolbox by 1, 8 and 32 chains at once, each a
//! tokio task as in a rollout. The peer, in the same run on the same corpus and queries,
//! is SQLite's FTS5 BM25 from Python threads (`scripts/bench/fts5_search.py`).
//!
//! Run: `cargo bench -p agentfly-tools --bench search` (after `agentfly fetch-corpus`).

use agentfly_core::Toolbox;
use agentfly_envs::wiki::{WikiIndex, title_key};
use std::time::{Duration, Instant};

const K: usize = 5;
const QUERIES: usize = 1024;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A sentence of every few articles, with the title's words left out: queries like the
/// agents' own.
fn queries(index: &WikiIndex) -> Vec<String> {
    let articles = index.corpus().articles();
    articles
        .iter()
        .step_by((articles.len() / QUERIES).max(1))
        .take(QUERIES)
        .map(|a| {
            let title: Vec<String> = title_key(&a.title).split(' ').map(str::to_string).collect();
            a.summary
                .split(". ")
                .next()
                .unwrap_or("")
                .split_whitespace()
                .filter(|w| !title.contains(&title_key(w)))
                .take(12)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

async fn run_chains(toolbox: &Toolbox, queries: &[String], chains: usize) -> (Vec<f64>, Duration) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..chains {
        let toolbox = toolbox.clone();
        let mine: Vec<String> = queries.iter().skip(c).step_by(chains).cloned().collect();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for q in mine {
                let args = serde_json::json!({"query": q, "k": K}).to_string();
                let t = Instant::now();
                let out = toolbox.call_json("search", &args).await;
                assert!(!out.is_error, "{}", out.text);
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by(f64::total_cmp);
    (all, start.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let corpus = agentfly_testdata::wiki_corpus();
    let cache = agentfly_testdata::repo().join("target/bench-wiki-index");
    let built = Instant::now();
    let _ = std::fs::remove_dir_all(&cache);
    let index = WikiIndex::open_or_build(&corpus, &cache).unwrap();
    let build_s = built.elapsed().as_secs_f64();
    let opened = Instant::now();
    let index = {
        drop(index);
        WikiIndex::open_or_build(&corpus, &cache).unwrap()
    };
    let open_s = opened.elapsed().as_secs_f64();
    let queries = queries(&index);
    agentfly_tools::wiki::install(index);
    let toolbox = Toolbox::from_names(&["search"]).unwrap();
    let queries_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(queries_file.path(), queries.join("\n")).unwrap();
    println!(
        "{} queries of up to 12 words, k = {K}; agentfly's index built in {build_s:.2} s (cached: opened in {open_s:.2} s)",
        queries.len()
    );
    println!(
        "| chains | agentfly p50 ms | p99 ms | queries/s | FTS5 p50 ms | p99 ms | queries/s | ratio (queries/s) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = run_chains(&toolbox, &queries[..64], 2).await; // warm-up
    let mut peer_build = None;
    for chains in [1, 8, 32] {
        let (lat, wall) = run_chains(&toolbox, &queries, chains).await;
        let ours_qps = lat.len() as f64 / wall.as_secs_f64();
        let peer = std::process::Command::new("python3")
            .arg(agentfly_testdata::repo().join("scripts/bench/fts5_search.py"))
            .arg(&corpus)
            .arg(queries_file.path())
            .arg(chains.to_string())
            .arg(K.to_string())
            .output()
            .unwrap();
        assert!(
            peer.status.success(),
            "{}",
            String::from_utf8_lossy(&peer.stderr)
        );
        let peer: serde_json::Value = serde_json::from_slice(&peer.stdout).unwrap();
        let peer_qps = peer["queries_per_s"].as_f64().unwrap();
        peer_build = peer["build_s"].as_f64();
        println!(
            "| {chains} | {:.2} | {:.2} | {ours_qps:.0} | {:.2} | {:.2} | {peer_qps:.0} | {:.2}× |",
            quantile(&lat, 0.5),
            quantile(&lat, 0.99),
            peer["p50_ms"].as_f64().unwrap(),
            peer["p99_ms"].as_f64().unwrap(),
            ours_qps / peer_qps
        );
    }
    if let Some(b) = peer_build {
        println!("FTS5 index built in memory in {b:.2} s (every run: it has no cache)");
    }
}
