//! One pool per environment type, looked up by the type a tool names.

use super::contract::Env;
use super::pool::{EnvPool, PoolConfig, PoolMetrics};
use futures_util::future::BoxFuture;
use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the set needs of a pool without knowing its environment type.
trait AnyPool: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn name(&self) -> &'static str;
    fn metrics(&self) -> PoolMetrics;
    fn close(&self) -> BoxFuture<'static, ()>;
}

impl<T: Env> AnyPool for EnvPool<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn name(&self) -> &'static str {
        type_name::<T>()
    }
    fn metrics(&self) -> PoolMetrics {
        EnvPool::metrics(self)
    }
    fn close(&self) -> BoxFuture<'static, ()> {
        let pool = self.clone();
        Box::pin(async move { pool.close().await })
    }
}

/// The pools of a run, one per environment type. A type without a pool of its own gets one
/// on first use, with its default config and the default [`PoolConfig`]. Cheap to clone.
#[derive(Clone, Default)]
pub struct EnvPools {
    inner: Arc<Mutex<HashMap<TypeId, Box<dyn AnyPool>>>>,
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
        self.lock().insert(TypeId::of::<T>(), Box::new(pool));
    }

    /// The pool of `T`, made with the defaults if there is none yet.
    pub fn get<T: Env>(&self) -> EnvPool<T> {
        self.lock()
            .entry(TypeId::of::<T>())
            .or_insert_with(|| {
                Box::new(EnvPool::<T>::new(
                    T::Config::default(),
                    self.default_pool.clone(),
                ))
            })
            .as_any()
            .downcast_ref::<EnvPool<T>>()
            .expect("keyed by its TypeId")
            .clone()
    }

    /// Each pool's counters, by environment type name.
    pub fn metrics(&self) -> Vec<(&'static str, PoolMetrics)> {
        let mut all: Vec<_> = self
            .lock()
            .values()
            .map(|p| (p.name(), p.metrics()))
            .collect();
        all.sort_by_key(|(name, _)| *name);
        all
    }

    /// Closes every pool (see [`EnvPool::close`]).
    pub async fn close(&self) {
        let closes: Vec<_> = self.lock().values().map(|p| p.close()).collect();
        for close in closes {
            close.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Box<dyn AnyPool>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
