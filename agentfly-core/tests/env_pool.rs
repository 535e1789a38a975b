//! The environment pool: leasing, timeouts, FIFO order, reset and replacement, per-chain
//! affinity through `CallContext`, and a stress test of thousands of chains that sleep,
//! panic and are cancelled over a small pool.

use agentfly_core::env::{Env, EnvError, EnvPool, EnvPools, LeaseError, PoolConfig};
use agentfly_core::{CallContext, Sample, Toolbox, tool};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Instances alive in this process, per test (each test uses its own `Probe` config id).
static ALIVE: Mutex<Vec<i64>> = Mutex::new(Vec::new());

fn alive(slot: usize) -> i64 {
    ALIVE.lock().unwrap().get(slot).copied().unwrap_or(0)
}

fn bump(slot: usize, by: i64) {
    let mut alive = ALIVE.lock().unwrap();
    if alive.len() <= slot {
        alive.resize(slot + 1, 0);
    }
    alive[slot] += by;
}

#[derive(Clone, Default, serde::Deserialize)]
struct ProbeConfig {
    /// Which `ALIVE` counter this test's instances count in.
    slot: usize,
    /// `reset` fails when true (checked at reset time).
    #[serde(skip)]
    fail_reset: Arc<AtomicBool>,
    /// `reset` hangs when true.
    #[serde(skip)]
    hang_reset: Arc<AtomicBool>,
}

/// A test environment that counts itself and records what happened to it.
struct Probe {
    slot: usize,
    value: i64,
    resets: usize,
    sample: Option<String>,
    config: ProbeConfig,
}

impl Drop for Probe {
    fn drop(&mut self) {
        bump(self.slot, -1);
    }
}

impl Env for Probe {
    type Config = ProbeConfig;

    async fn create(config: &ProbeConfig) -> Result<Self, EnvError> {
        bump(config.slot, 1);
        Ok(Probe {
            slot: config.slot,
            value: 0,
            resets: 0,
            sample: None,
            config: config.clone(),
        })
    }

    async fn reset(&mut self, sample: Option<&Sample>) -> Result<(), EnvError> {
        if self.config.hang_reset.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.config.fail_reset.load(Ordering::SeqCst) {
            return Err(EnvError::new("reset refused"));
        }
        self.value = 0;
        self.resets += 1;
        self.sample = sample.map(|s| s.id.clone());
        Ok(())
    }
}

fn config(slot: usize) -> ProbeConfig {
    ProbeConfig {
        slot,
        ..ProbeConfig::default()
    }
}

fn pool(slot: usize, capacity: usize, timeout_ms: u64) -> EnvPool<Probe> {
    EnvPool::new(
        config(slot),
        PoolConfig {
            capacity,
            lease_timeout: Duration::from_millis(timeout_ms),
            reset_timeout: Duration::from_millis(200),
        },
    )
}

/// Waits until every returned instance has been reset and put back.
async fn settle(pool: &EnvPool<Probe>) {
    for _ in 0..500 {
        let m = pool.metrics();
        if m.leased == 0 && m.idle == m.live {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the pool did not settle: {:?}", pool.metrics());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returned_instances_are_reset_and_reused() {
    let pool = pool(0, 2, 1000);
    let mut a = pool.lease().await.unwrap();
    a.value = 41;
    let id = a.id();
    drop(a);
    settle(&pool).await;
    let again = pool.lease().await.unwrap();
    assert_eq!(again.id(), id, "the idle instance is reused");
    assert_eq!(again.value, 0, "and was reset");
    assert_eq!(again.resets, 1);
    let m = pool.metrics();
    assert_eq!((m.created, m.leases, m.leased, m.replaced), (1, 2, 1, 0));
    drop(again);
    pool.close().await;
    settle_alive(0).await;
}

async fn settle_alive(slot: usize) {
    for _ in 0..500 {
        if alive(slot) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{} instances leaked", alive(slot));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_times_out_with_a_clear_error() {
    let pool = pool(1, 2, 50);
    let _a = pool.lease().await.unwrap();
    let _b = pool.lease().await.unwrap();
    let err = pool.lease().await.unwrap_err();
    let LeaseError::Timeout {
        waited,
        leased,
        capacity,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(*waited >= Duration::from_millis(50));
    assert_eq!((*leased, *capacity), (2, 2));
    let text = err.to_string();
    assert!(
        text.starts_with("no `env_pool::Probe` instance became free within 0.")
            && text.ends_with("s (2 of 2 leased)"),
        "{text}"
    );
    assert_eq!(pool.metrics().timeouts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_first_come_first_served() {
    let pool = pool(2, 1, 5000);
    let held = pool.lease().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let (pool, order) = (pool.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let lease = pool.lease().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(lease);
        }));
        // Let waiter i queue before waiter i + 1.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(held);
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    let m = pool.metrics();
    assert_eq!(m.waited, 8);
    assert!(
        m.wait_p50_ms > 0.0 && m.wait_p99_ms >= m.wait_p50_ms,
        "{m:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_failed_and_hung_instances_are_replaced() {
    let config = config(3);
    let pool = EnvPool::<Probe>::new(
        config.clone(),
        PoolConfig {
            capacity: 1,
            lease_timeout: Duration::from_secs(5),
            reset_timeout: Duration::from_millis(100),
        },
    );
    // Marked broken by its holder.
    let mut lease = pool.lease().await.unwrap();
    let first = lease.id();
    lease.mark_broken();
    drop(lease);
    let lease = pool.lease().await.unwrap();
    assert_ne!(lease.id(), first);
    let second = lease.id();
    drop(lease);

    // Dropped by a panicking holder.
    let p = pool.clone();
    let panicked = tokio::spawn(async move {
        let _lease = p.lease().await.unwrap();
        panic!("the holder fails");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    let lease = pool.lease().await.unwrap();
    let third = lease.id();
    assert_ne!(third, second);

    // Its reset fails on return.
    config.fail_reset.store(true, Ordering::SeqCst);
    drop(lease);
    settle(&pool).await;
    config.fail_reset.store(false, Ordering::SeqCst);
    let lease = pool.lease().await.unwrap();
    let fourth = lease.id();
    assert_ne!(fourth, third);

    // Its reset hangs: abandoned after the reset timeout, and the waiter still gets one.
    config.hang_reset.store(true, Ordering::SeqCst);
    drop(lease);
    let waiting = pool.lease();
    tokio::time::sleep(Duration::from_millis(20)).await;
    config.hang_reset.store(false, Ordering::SeqCst);
    let lease = waiting.await.unwrap();
    assert_ne!(lease.id(), fourth);
    let m = pool.metrics();
    assert_eq!((m.replaced, m.created, m.live), (4, 5, 1), "{m:?}");
    drop(lease);
    pool.close().await;
    settle_alive(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_creates_instances_up_to_capacity() {
    let pool = pool(4, 3, 1000);
    pool.prewarm(10).await.unwrap();
    let m = pool.metrics();
    assert_eq!((m.live, m.idle, m.created), (3, 3, 3));
    let lease = pool.lease().await.unwrap();
    assert_eq!(pool.metrics().created, 3, "a warm instance was used");
    drop(lease);
    pool.close().await;
    settle_alive(4).await;
}

static TOOL_CALLS: AtomicI64 = AtomicI64::new(0);

impl Probe {
    fn add(&mut self, by: i64) -> i64 {
        TOOL_CALLS.fetch_add(1, Ordering::SeqCst);
        self.value += by;
        self.value
    }
}

/// Adds to the chain's probe (async).
#[tool(env = Probe)]
async fn probe_add(
    probe: &mut Probe,
    /// How much.
    by: i64,
) -> String {
    probe.add(by).to_string()
}

/// Adds to the chain's probe (sync).
#[tool(env = Probe)]
fn probe_add_sync(
    probe: &mut Probe,
    /// How much.
    by: i64,
) -> String {
    probe.add(by).to_string()
}

/// Panics after touching the chain's probe.
#[tool(env = Probe)]
async fn probe_panic(probe: &mut Probe) -> String {
    probe.add(100);
    panic!("boom")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_keeps_one_instance_for_all_its_tools() {
    let pools = EnvPools::new(PoolConfig::default());
    pools.insert(pool(5, 2, 1000));
    let toolbox = Toolbox::from_names(&["probe_add", "probe_add_sync", "probe_panic"]).unwrap();
    let mut chain = CallContext::with_pools(pools.clone());
    chain.set_sample(Sample::new("q7", serde_json::json!({})));
    let mut other = CallContext::with_pools(pools.clone());
    let call = |name: &'static str, by: i64| (name, format!(r#"{{"by": {by}}}"#));
    for (ctx, expect) in [(&mut chain, "2"), (&mut other, "2")] {
        let (name, args) = call("probe_add", 2);
        assert_eq!(toolbox.call_json_in(ctx, name, &args).await.text, expect);
    }
    let (name, args) = call("probe_add_sync", 3);
    assert_eq!(
        toolbox.call_json_in(&mut chain, name, &args).await.text,
        "5"
    );
    let (name, args) = call("probe_add", 1);
    assert_eq!(
        toolbox.call_json_in(&mut chain, name, &args).await.text,
        "6"
    );
    let probe = chain.env_mut::<Probe>().unwrap();
    assert_eq!(
        probe.sample.as_deref(),
        Some("q7"),
        "reset with the chain's sample"
    );
    let metrics = &pools.metrics()[0].1;
    assert_eq!(
        (metrics.leases, metrics.leased),
        (2, 2),
        "one lease per chain"
    );

    // A call that panics loses its instance (it may be half-changed); the next call leases
    // a fresh one.
    let observation = toolbox.call_json_in(&mut chain, "probe_panic", "{}").await;
    assert!(observation.is_error && observation.text.contains("boom"));
    assert!(!chain.has_env::<Probe>());
    let (name, args) = call("probe_add", 1);
    assert_eq!(
        toolbox.call_json_in(&mut chain, name, &args).await.text,
        "1"
    );

    drop(chain);
    drop(other);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let metrics = &pools.metrics()[0].1;
    assert_eq!((metrics.leased, metrics.replaced), (0, 1), "{metrics:?}");
    pools.close().await;
    settle_alive(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_are_made_on_demand_and_a_missing_pool_is_a_clear_error() {
    let toolbox = Toolbox::from_names(&["probe_add"]).unwrap();
    let observation = toolbox.call_json("probe_add", r#"{"by": 1}"#).await;
    assert!(
        observation.text.contains("no pool to lease one from"),
        "{}",
        observation.text
    );
    let pools = EnvPools::new(PoolConfig {
        capacity: 1,
        lease_timeout: Duration::from_millis(30),
        ..PoolConfig::default()
    });
    let mut a = CallContext::with_pools(pools.clone());
    let mut b = CallContext::with_pools(pools.clone());
    assert_eq!(
        toolbox
            .call_json_in(&mut a, "probe_add", r#"{"by": 4}"#)
            .await
            .text,
        "4"
    );
    // Capacity 1 and `a` holds it: `b` times out with an observation, not a hang.
    let observation = toolbox
        .call_json_in(&mut b, "probe_add", r#"{"by": 1}"#)
        .await;
    assert_eq!(
        observation.error_kind,
        Some(agentfly_core::ToolErrorKind::EnvironmentUnavailable)
    );
    assert!(
        observation.text.contains("(1 of 1 leased)"),
        "{}",
        observation.text
    );
    drop(a);
    pools.close().await;
}

/// What happened to one chain of the stress test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    Done,
    TimedOut,
    Panicked,
    Cancelled,
}

struct InUse(Arc<Mutex<HashSet<u64>>>, u64);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
    }
}

/// Keeps the stress test's deliberate panics out of the test output.
fn silence_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("a chain fails"));
            if !expected {
                default(info);
            }
        }));
    });
}

/// Runs the chains; returns how many ended each way.
async fn stress(slot: usize, chains: usize, capacity: usize, seed: u64) -> [usize; 4] {
    silence_expected_panics();
    let pool = pool(slot, capacity, 150);
    let in_use = Arc::new(Mutex::new(HashSet::new()));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(chains);
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..chains {
        let r = next();
        let (pool, in_use, violations) = (pool.clone(), in_use.clone(), violations.clone());
        let hold_us = r % 800;
        let panics = r % 11 == 0;
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros((r >> 20) % 500)).await;
            let lease = match pool.lease().await {
                Ok(lease) => lease,
                Err(LeaseError::Timeout { .. }) => return Outcome::TimedOut,
                Err(e) => panic!("unexpected: {e}"),
            };
            if !in_use.lock().unwrap().insert(lease.id()) {
                violations.fetch_add(1, Ordering::SeqCst);
            }
            // Leaves the in-use set however the chain ends (dropped before the lease).
            let _marker = InUse(in_use, lease.id());
            tokio::time::sleep(Duration::from_micros(hold_us)).await;
            if panics {
                panic!("a chain fails while holding its lease");
            }
            drop(lease);
            Outcome::Done
        });
        if r % 7 == 0 {
            // Cancelled from outside after a while: waiting, holding or already done.
            let abort = task.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros((r >> 40) % 2000)).await;
                abort.abort();
            });
        }
        handles.push(task);
    }
    let mut outcomes = Vec::with_capacity(chains);
    for task in handles {
        outcomes.push(match task.await {
            Ok(outcome) => outcome,
            Err(e) if e.is_panic() => Outcome::Panicked,
            Err(e) if e.is_cancelled() => Outcome::Cancelled,
            Err(e) => panic!("{e}"),
        });
    }
    settle(&pool).await;
    let m = pool.metrics();
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "an instance was leased twice at once"
    );
    assert_eq!(
        outcomes.len(),
        chains,
        "every chain ended one way or another"
    );
    assert!(
        m.live <= capacity && m.idle == m.live && m.leased == 0,
        "{m:?}"
    );
    let done = outcomes.iter().filter(|o| **o == Outcome::Done).count() as u64;
    let panicked = outcomes.iter().filter(|o| **o == Outcome::Panicked).count() as u64;
    let timed_out = outcomes.iter().filter(|o| **o == Outcome::TimedOut).count() as u64;
    assert!(m.leases >= done + panicked, "{m:?}");
    assert_eq!(m.timeouts, timed_out, "every timeout reached its waiter");
    assert!(
        m.replaced >= panicked,
        "panicked holders' instances were replaced: {m:?}"
    );
    assert_eq!(
        alive(slot),
        m.live as i64,
        "instances outside the pool leaked"
    );
    pool.close().await;
    settle_alive(slot).await;
    let count = |o: Outcome| outcomes.iter().filter(|x| **x == o).count();
    [
        count(Outcome::Done),
        count(Outcome::TimedOut),
        count(Outcome::Panicked),
        count(Outcome::Cancelled),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_chains_over_a_small_pool() {
    let [done, timed_out, panicked, cancelled] = stress(6, 4000, 4, 0x9E37_79B9_7F4A_7C15).await;
    // The mix really happened: some finished, some waited too long, some panicked while
    // holding an instance and some were cancelled.
    assert!(
        done > 100 && timed_out > 0 && panicked > 0 && cancelled > 0,
        "{done} done, {timed_out} timed out, {panicked} panicked, {cancelled} cancelled"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn no_instance_is_leaked_or_shared(
        chains in 50usize..600,
        capacity in 1usize..5,
        seed in 1u64..u64::MAX,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(stress(7, chains, capacity, seed));
    }
}

/// A pool made before its runtime (as a binary's set-up often does) still resets and
/// reuses what comes back inside the runtime, instead of replacing every instance.
#[test]
fn a_pool_made_outside_the_runtime_reuses_its_instances() {
    let pool = pool(40, 1, 1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..3 {
            let mut lease = pool.lease().await.unwrap();
            lease.value += 1;
            drop(lease);
            settle(&pool).await;
        }
        let m = pool.metrics();
        assert_eq!((m.created, m.replaced, m.leases), (1, 0, 3), "{m:?}");
    });
}
