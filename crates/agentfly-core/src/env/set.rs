//! One pool per environment type, looked up by the type a tool names.

use super::{Env, EnvPool, PoolConfig, PoolMetrics};
use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type CloseFn = Box<dyn Fn() -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;
type MetricsFn = Box<dyn Fn() -> PoolMetrics + Send + Sync>;

struct Entry {
    pool: Box<dyn Any + Send + Sync>,
    name: &'static str,
    close: CloseFn,
    metrics: MetricsFn,
}

/// The pools of a run, one per environment type. A type without a pool of its own gets one
/// on first use, with its default config and the default [`PoolConfig`]. Cheap to clone.
#[derive(Clone, Default)]
pub struct EnvPools {
    inner: Arc<Mutex<HashMap<TypeId, Entry>>>,
    default_pool: PoolConfig,
}

impl std::fmt::Debug for EnvPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.metrics()).finish()
    }
}

impl EnvPools {
    /// No pools yet; those made on demand use `default_pool`.
    pub fn new(default_pool: PoolConfig) -> Self {
        Self {
            inner: Arc::default(),
            default_pool,
        }
    }

    /// Adds (or replaces) the pool of `T`.
    pub fn insert<T: Env>(&self, pool: EnvPool<T>) {
        self.lock().insert(TypeId::of::<T>(), Self::entry(pool));
    }

    fn entry<T: Env>(pool: EnvPool<T>) -> Entry {
        let closing = pool.clone();
        let measured = pool.clone();
        Entry {
            pool: Box::new(pool),
            name: type_name::<T>(),
            close: Box::new(move || {
                let pool = closing.clone();
                Box::pin(async move { pool.close().await })
            }),
            metrics: Box::new(move || measured.metrics()),
        }
    }

    /// The pool of `T`, made with the defaults if there is none yet.
    pub fn get<T: Env>(&self) -> EnvPool<T> {
        if let Some(pool) = self.get_existing::<T>() {
            return pool;
        }
        let made = EnvPool::<T>::new(T::Config::default(), self.default_pool.clone());
        // Another thread may have made one meanwhile: the first one stays.
        self.lock()
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Self::entry(made))
            .pool
            .downcast_ref::<EnvPool<T>>()
            .expect("keyed by its TypeId")
            .clone()
    }

    fn get_existing<T: Env>(&self) -> Option<EnvPool<T>> {
        self.lock()
            .get(&TypeId::of::<T>())
            .and_then(|e| e.pool.downcast_ref::<EnvPool<T>>())
            .cloned()
    }

    /// Each pool's counters, by environment type name.
    pub fn metrics(&self) -> Vec<(&'static str, PoolMetrics)> {
        let mut all: Vec<_> = self
            .lock()
            .values()
            .map(|e| (e.name, (e.metrics)()))
            .collect();
        all.sort_by_key(|(name, _)| *name);
        all
    }

    /// Closes every pool (see [`EnvPool::close`]).
    pub async fn close(&self) {
        let closes: Vec<_> = self.lock().values().map(|e| (e.close)()).collect();
        for close in closes {
            close.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Entry>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
