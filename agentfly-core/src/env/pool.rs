//! A bounded pool of environment instances with FIFO leasing, timeouts and replacement.

use super::contract::{Env, EnvError};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How a pool is sized and how long a lease may wait.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// The most instances that exist at once (leased, idle or being reset).
    pub capacity: usize,
    /// How long [`EnvPool::lease`] waits for a free instance before it fails.
    #[serde(with = "super::duration_secs")]
    pub lease_timeout: Duration,
    /// The longest a returned instance's reset, health check or close may take; one that
    /// hangs is dropped (and so killed) and replaced.
    #[serde(with = "super::duration_secs")]
    pub reset_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            capacity: 8,
            lease_timeout: Duration::from_secs(60),
            reset_timeout: Duration::from_secs(30),
        }
    }
}

/// Why no instance was leased.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Every instance stayed busy for the whole lease timeout.
    #[error(
        "no `{env}` instance became free within {:.1} s ({leased} of {capacity} leased)",
        waited.as_secs_f64()
    )]
    Timeout {
        /// The environment type.
        env: &'static str,
        /// How long the lease waited.
        waited: Duration,
        /// Leases out when it gave up.
        leased: usize,
        /// The pool's capacity.
        capacity: usize,
    },
    /// A new instance could not be created.
    #[error("could not create a `{env}` instance: {source}")]
    Create {
        /// The environment type.
        env: &'static str,
        /// Why.
        source: EnvError,
    },
    /// The pool was closed.
    #[error("the `{env}` pool is closed")]
    Closed {
        /// The environment type.
        env: &'static str,
    },
}

/// A snapshot of a pool's counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PoolMetrics {
    /// The pool's capacity.
    pub capacity: usize,
    /// Instances that exist now (leased, idle or being reset).
    pub live: usize,
    /// Instances waiting in the pool.
    pub idle: usize,
    /// Leases held now.
    pub leased: usize,
    /// Leases granted so far.
    pub leases: u64,
    /// Leases that had to wait for a free instance.
    pub waited: u64,
    /// Leases that gave up at the timeout.
    pub timeouts: u64,
    /// Instances created (including replacements).
    pub created: u64,
    /// Instances closed because they were broken (their holder panicked or a call on them
    /// was cut off), or their reset or health check failed.
    pub replaced: u64,
    /// Creations that failed.
    pub create_failures: u64,
    /// Median wait of a lease, in milliseconds.
    pub wait_p50_ms: f64,
    /// 99th-percentile wait of a lease, in milliseconds.
    pub wait_p99_ms: f64,
    /// Longest wait, in milliseconds.
    pub wait_max_ms: f64,
}

/// The most recent waits kept for the percentiles.
const WAIT_WINDOW: usize = 1 << 16;

#[derive(Default)]
struct State {
    live: usize,
    leased: usize,
    leases: u64,
    waited: u64,
    timeouts: u64,
    created: u64,
    replaced: u64,
    create_failures: u64,
    waits_ms: VecDeque<f64>,
    /// Instances handed back and not yet reset or closed.
    returning: usize,
    closed: bool,
}

struct Slot<T> {
    id: u64,
    env: T,
}

struct Inner<T: Env> {
    config: T::Config,
    pool: PoolConfig,
    permits: Arc<Semaphore>,
    state: Mutex<State>,
    idle: Mutex<Vec<Slot<T>>>,
    next_id: AtomicU64,
    runtime: Option<Handle>,
}

impl<T: Env> Inner<T> {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held cannot leave the counters half-updated in a way
        // that matters more than losing the pool, so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Slot<T>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn create(&self) -> Result<Slot<T>, LeaseError> {
        match T::create(&self.config).await {
            Ok(env) => {
                let mut state = self.state();
                state.created += 1;
                state.live += 1;
                Ok(Slot {
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    env,
                })
            }
            Err(source) => {
                self.state().create_failures += 1;
                Err(LeaseError::Create {
                    env: std::any::type_name::<T>(),
                    source,
                })
            }
        }
    }

    /// Resets a returned instance and puts it back, or closes it; then frees its permit.
    async fn give_back(
        self: Arc<Self>,
        mut slot: Slot<T>,
        broken: bool,
        permit: OwnedSemaphorePermit,
    ) {
        let limit = self.pool.reset_timeout;
        let usable = !broken
            && !self.state().closed
            && tokio::time::timeout(limit, async {
                slot.env.reset(None).await.is_ok() && slot.env.health_check().await.is_ok()
            })
            .await
            .unwrap_or(false);
        if usable {
            self.idle().push(slot);
        } else {
            {
                let mut state = self.state();
                state.live -= 1;
                if !state.closed {
                    state.replaced += 1;
                }
            }
            // A close that hangs is abandoned: dropping the instance frees it.
            let _ = tokio::time::timeout(limit, slot.env.close()).await;
        }
        self.state().returning -= 1;
        drop(permit);
    }
}

/// A bounded pool of instances of one environment type and config. Cheap to clone (all
/// clones are the same pool).
pub struct EnvPool<T: Env> {
    inner: Arc<Inner<T>>,
}

impl<T: Env> Clone for EnvPool<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Env> std::fmt::Debug for EnvPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvPool")
            .field("env", &std::any::type_name::<T>())
            .field("metrics", &self.metrics())
            .finish()
    }
}

impl<T: Env> EnvPool<T> {
    /// An empty pool; instances are created on demand (or by [`prewarm`](Self::prewarm)).
    /// Made inside a tokio runtime, returned instances are reset on that runtime; else on
    /// the runtime a lease is dropped in; a lease dropped outside any runtime closes its
    /// instance instead of reusing it.
    pub fn new(config: T::Config, pool: PoolConfig) -> Self {
        let capacity = pool.capacity.max(1);
        Self {
            inner: Arc::new(Inner {
                config,
                pool: PoolConfig { capacity, ..pool },
                permits: Arc::new(Semaphore::new(capacity)),
                state: Mutex::new(State::default()),
                idle: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(0),
                runtime: Handle::try_current().ok(),
            }),
        }
    }

    /// The pool's sizing.
    pub fn pool_config(&self) -> &PoolConfig {
        &self.inner.pool
    }

    /// The config instances are created with.
    pub fn env_config(&self) -> &T::Config {
        &self.inner.config
    }

    /// Creates instances until `count` (at most the capacity) are idle or leased.
    pub async fn prewarm(&self, count: usize) -> Result<(), LeaseError> {
        let count = count.min(self.inner.pool.capacity);
        loop {
            let permit = self.acquire().await?;
            if self.inner.state().live >= count {
                return Ok(());
            }
            let slot = self.inner.create().await?;
            self.inner.idle().push(slot);
            drop(permit);
        }
    }

    async fn acquire(&self) -> Result<OwnedSemaphorePermit, LeaseError> {
        let env = std::any::type_name::<T>();
        let start = Instant::now();
        let timeout = self.inner.pool.lease_timeout;
        let acquired = tokio::time::timeout(timeout, self.inner.permits.clone().acquire_owned());
        match acquired.await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_closed)) => Err(LeaseError::Closed { env }),
            Err(_elapsed) => {
                let mut state = self.inner.state();
                state.timeouts += 1;
                Err(LeaseError::Timeout {
                    env,
                    waited: start.elapsed(),
                    leased: state.leased,
                    capacity: self.inner.pool.capacity,
                })
            }
        }
    }

    /// Leases an instance: an idle one, or a new one while the pool is below capacity;
    /// otherwise waits (first come, first served) up to the lease timeout.
    pub async fn lease(&self) -> Result<Lease<T>, LeaseError> {
        let start = Instant::now();
        let must_wait = self.inner.permits.available_permits() == 0;
        let permit = self.acquire().await?;
        let idle = self.inner.idle().pop();
        let slot = match idle {
            Some(slot) => slot,
            None => self.inner.create().await?,
        };
        let waited_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut state = self.inner.state();
        state.leases += 1;
        state.leased += 1;
        state.waited += u64::from(must_wait);
        if state.waits_ms.len() == WAIT_WINDOW {
            state.waits_ms.pop_front();
        }
        state.waits_ms.push_back(waited_ms);
        Ok(Lease {
            slot: Some(slot),
            permit: Some(permit),
            pool: self.inner.clone(),
            broken: false,
        })
    }

    /// The pool's counters now.
    pub fn metrics(&self) -> PoolMetrics {
        let idle = self.inner.idle().len();
        let state = self.inner.state();
        let mut waits: Vec<f64> = state.waits_ms.iter().copied().collect();
        waits.sort_by(f64::total_cmp);
        let quantile = |q: f64| {
            if waits.is_empty() {
                0.0
            } else {
                waits[((waits.len() - 1) as f64 * q).round() as usize]
            }
        };
        PoolMetrics {
            capacity: self.inner.pool.capacity,
            live: state.live,
            idle,
            leased: state.leased,
            leases: state.leases,
            waited: state.waited,
            timeouts: state.timeouts,
            created: state.created,
            replaced: state.replaced,
            create_failures: state.create_failures,
            wait_p50_ms: quantile(0.5),
            wait_p99_ms: quantile(0.99),
            wait_max_ms: waits.last().copied().unwrap_or(0.0),
        }
    }

    /// Refuses new leases, closes the idle instances and waits (up to the reset timeout)
    /// for those being handed back to be closed too. Instances still leased are closed when
    /// they come back.
    pub async fn close(&self) {
        self.inner.state().closed = true;
        self.inner.permits.close();
        let idle: Vec<Slot<T>> = std::mem::take(&mut *self.inner.idle());
        self.inner.state().live -= idle.len();
        for slot in idle {
            let _ = tokio::time::timeout(self.inner.pool.reset_timeout, slot.env.close()).await;
        }
        let deadline = Instant::now() + self.inner.pool.reset_timeout;
        while self.inner.state().returning > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// An instance leased from an [`EnvPool`]; dereferences to it. Dropping the lease returns
/// the instance: it is reset and reused, or closed and replaced if it is broken — marked
/// with [`mark_broken`](Self::mark_broken), or dropped while its holder was panicking.
pub struct Lease<T: Env> {
    slot: Option<Slot<T>>,
    permit: Option<OwnedSemaphorePermit>,
    pool: Arc<Inner<T>>,
    broken: bool,
}

impl<T: Env> Lease<T> {
    /// The instance's id in its pool (ids are never reused).
    pub fn id(&self) -> u64 {
        self.slot.as_ref().map_or(u64::MAX, |s| s.id)
    }

    /// The instance must not be reused: close and replace it when it comes back.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Has it been marked broken?
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}

impl<T: Env> Deref for Lease<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self
            .slot
            .as_ref()
            .expect("a lease holds its instance until dropped")
            .env
    }
}

impl<T: Env> DerefMut for Lease<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self
            .slot
            .as_mut()
            .expect("a lease holds its instance until dropped")
            .env
    }
}

impl<T: Env> std::fmt::Debug for Lease<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("env", &std::any::type_name::<T>())
            .field("id", &self.id())
            .field("broken", &self.broken)
            .finish()
    }
}

impl<T: Env> Drop for Lease<T> {
    fn drop(&mut self) {
        let (Some(slot), Some(permit)) = (self.slot.take(), self.permit.take()) else {
            return;
        };
        let broken = self.broken || std::thread::panicking();
        let mut state = self.pool.state();
        state.leased -= 1;
        // The pool's own runtime, else the one this lease is dropped in (a pool made
        // before its runtime, as a binary's set-up often does).
        match self
            .pool
            .runtime
            .clone()
            .or_else(|| Handle::try_current().ok())
        {
            Some(runtime) => {
                state.returning += 1;
                drop(state);
                runtime.spawn(self.pool.clone().give_back(slot, broken, permit));
            }
            None => {
                // No runtime to reset it on: drop it (its Drop frees what it holds).
                state.live -= 1;
                state.replaced += 1;
                drop(state);
                drop(slot);
                drop(permit);
            }
        }
    }
}
