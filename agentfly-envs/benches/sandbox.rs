//! Sandbox call latency and throughput with 1, 8 and 64 concurrent chains over a pool of 8
//! PythonSandbox instances; the peer is what many agent frameworks do, a fresh `python3`
//! process per call, at the same concurrency (bounded to 8 processes at once, like the pool).
//!
//! First, what a chain waits for when it leases a sandbox: lease to the first cell's answer,
//! when the instance was returned long enough ago to be reset, and when it is leased again
//! at once (its reset on return is then part of the wait).
//!
//! Run: `cargo bench -p agentfly-envs --bench sandbox`

use agentfly_core::env::{EnvPool, PoolConfig};
use agentfly_envs::{PythonSandbox, SandboxConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const CALLS_PER_CHAIN: usize = 4;
const CODE: &str = "x = sum(i * i for i in range(2000))\nx";

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

struct Row {
    p50_ms: f64,
    p99_ms: f64,
    calls_per_s: f64,
}

fn summarize(mut latencies: Vec<f64>, wall: Duration) -> Row {
    latencies.sort_by(f64::total_cmp);
    Row {
        p50_ms: quantile(&latencies, 0.5),
        p99_ms: quantile(&latencies, 0.99),
        calls_per_s: latencies.len() as f64 / wall.as_secs_f64(),
    }
}

/// `chains` chains at once, each leasing a sandbox and making its calls; latency is per
/// call, including the wait for a lease on the chain's first call.
async fn pooled(pool: &EnvPool<PythonSandbox>, chains: usize, rounds: usize) -> (Row, f64) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..chains {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..rounds {
                let asked = Instant::now();
                let mut sandbox = pool.lease().await.expect("a sandbox within the timeout");
                for call in 0..CALLS_PER_CHAIN {
                    let t = if call == 0 { asked } else { Instant::now() };
                    let out = sandbox.run(CODE).await;
                    assert_eq!(out.value.as_deref(), Some("2664667000"), "{out:?}");
                    latencies.push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = start.elapsed();
    (summarize(all, wall), pool.metrics().wait_p99_ms)
}

/// The same calls, each in a fresh `python3 -c` process, at most 8 at once.
async fn fresh_process(python: &std::path::Path, chains: usize, rounds: usize) -> Row {
    let slots = Arc::new(Semaphore::new(8));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let code = "x = sum(i * i for i in range(2000))\nprint(repr(x))";
    for _ in 0..chains {
        let (slots, python) = (slots.clone(), python.to_path_buf());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..rounds * CALLS_PER_CHAIN {
                let t = Instant::now();
                let _slot = slots.acquire().await.unwrap();
                let out = tokio::process::Command::new(&python)
                    .args(["-I", "-c", code])
                    .output()
                    .await
                    .unwrap();
                assert_eq!(out.stdout, b"2664667000\n");
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    summarize(all, start.elapsed())
}

/// Lease to the first cell's answer, `rounds` times on a pool of one instance; with
/// `settle`, the instance's reset on return (and 20 ms more) is waited out before the next
/// lease.
async fn lease_to_first_cell(rounds: usize, settle: bool) -> Vec<f64> {
    let pool = EnvPool::<PythonSandbox>::new(
        SandboxConfig::default(),
        PoolConfig {
            capacity: 1,
            ..PoolConfig::default()
        },
    );
    pool.prewarm(1).await.unwrap();
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        if settle {
            while pool.metrics().idle == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // What is made after the reset answered (a fresh interpreter) is ready too.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let asked = Instant::now();
        let mut sandbox = pool.lease().await.expect("a sandbox");
        let out = sandbox.run(CODE).await;
        assert_eq!(out.value.as_deref(), Some("2664667000"), "{out:?}");
        latencies.push(asked.elapsed().as_secs_f64() * 1e3);
        // What a chain leaves: a variable, a file, a module imported.
        sandbox
            .run("import json\nopen('f.txt', 'w').write('x')\ny = 1")
            .await;
    }
    pool.close().await;
    latencies.sort_by(f64::total_cmp);
    latencies
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("| lease to first cell | leases | p50 ms | p90 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (what, settle) in [
        ("returned and reset before", true),
        ("leased again at once", false),
    ] {
        let l = lease_to_first_cell(40, settle).await;
        println!(
            "| {what} | {} | {:.2} | {:.2} | {:.2} |",
            l.len(),
            quantile(&l, 0.5),
            quantile(&l, 0.9),
            l[l.len() - 1]
        );
    }
    // The reset itself (on return to the pool, off the next chain's path when the pool has
    // an idle instance).
    let mut sandbox = PythonSandbox::start(SandboxConfig::default())
        .await
        .unwrap();
    let mut resets = Vec::new();
    for _ in 0..40 {
        sandbox
            .run("import json\nopen('f.txt', 'w').write('x')\ny = 1")
            .await;
        let t = Instant::now();
        agentfly_core::env::Env::reset(&mut sandbox, None)
            .await
            .unwrap();
        resets.push(t.elapsed().as_secs_f64() * 1e3);
    }
    resets.sort_by(f64::total_cmp);
    println!(
        "| the reset alone | {} | {:.2} | {:.2} | {:.2} |",
        resets.len(),
        quantile(&resets, 0.5),
        quantile(&resets, 0.9),
        resets[resets.len() - 1]
    );
    println!();
    let config = SandboxConfig::default();
    let python = config.python();
    let pool = EnvPool::<PythonSandbox>::new(
        config,
        PoolConfig {
            capacity: 8,
            lease_timeout: Duration::from_secs(120),
            ..PoolConfig::default()
        },
    );
    let warm = Instant::now();
    pool.prewarm(8).await.unwrap();
    println!(
        "pool of 8 PythonSandbox instances started in {:.2} s; {CALLS_PER_CHAIN} calls per chain",
        warm.elapsed().as_secs_f64()
    );
    println!(
        "| chains | calls | sandbox p50 ms | sandbox p99 ms | sandbox calls/s | lease wait p99 ms | fresh python3 p50 ms | p99 ms | calls/s | throughput ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for chains in [1, 8, 64] {
        let rounds = if chains == 1 {
            50
        } else {
            200 / chains.min(64) * 2
        }
        .max(2);
        let (ours, wait_p99) = pooled(&pool, chains, rounds).await;
        let peer = fresh_process(&python, chains, rounds).await;
        println!(
            "| {chains} | {} | {:.2} | {:.2} | {:.0} | {wait_p99:.1} | {:.2} | {:.2} | {:.0} | {:.1}× |",
            chains * rounds * CALLS_PER_CHAIN,
            ours.p50_ms,
            ours.p99_ms,
            ours.calls_per_s,
            peer.p50_ms,
            peer.p99_ms,
            peer.calls_per_s,
            ours.calls_per_s / peer.calls_per_s
        );
    }
    let m = pool.metrics();
    println!(
        "pool: {} leases, {} waited, wait p50 {:.2} ms / p99 {:.1} ms, {} created, {} replaced",
        m.leases, m.waited, m.wait_p50_ms, m.wait_p99_ms, m.created, m.replaced
    );
    pool.close().await;
}
