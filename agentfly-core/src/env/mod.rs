//! Environments: the state behind stateful tools (a Python interpreter, a browser, a game),
//! isolated per chain and drawn from bounded pools.
//!
//! - [`Env`]: the contract — create from a config, reset with the sample's fields, health
//!   check, close.
//! - [`EnvPool`]: a bounded pool of instances of one type and config, leased FIFO with a
//!   timeout; a [`Lease`] goes back on drop (also when its holder panics or is cancelled),
//!   is reset on return, and is replaced when it is broken.
//! - [`EnvPools`]: one pool per environment type, which a chain's
//!   [`CallContext`](crate::CallContext) leases from on first use and keeps until the chain
//!   ends, so all its tools and its reward see the same instance.
//!
//! ```
//! use agentfly_core::env::{Env, EnvError, EnvPool, PoolConfig};
//! use agentfly_core::Sample;
//!
//! #[derive(Default)]
//! struct Counter { total: i64 }
//!
//! impl Env for Counter {
//!     type Config = ();
//!     async fn create(_: &()) -> Result<Self, EnvError> { Ok(Counter::default()) }
//!     async fn reset(&mut self, _: Option<&Sample>) -> Result<(), EnvError> {
//!         self.total = 0;
//!         Ok(())
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let pool = EnvPool::<Counter>::new((), PoolConfig { capacity: 2, ..PoolConfig::default() });
//! let mut lease = pool.lease().await.unwrap();
//! lease.total += 5;
//! drop(lease); // back to the pool, reset
//! # });
//! ```

mod pool;
mod set;

/// serde for a [`Duration`](std::time::Duration) written as seconds (`2.5`), as config
/// files write them: `#[serde(with = "agentfly_core::env::duration_secs")]`.
pub mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes seconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// Reads seconds; negative or non-finite values are errors.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

pub use pool::{EnvPool, Lease, LeaseError, PoolConfig, PoolMetrics};
pub use set::EnvPools;

use crate::Sample;
use serde::de::DeserializeOwned;
use std::future::Future;

/// An environment type: the state a stateful tool (`#[tool(env = T)]`) works on.
///
/// Every method is async and must not block the runtime; run blocking work with
/// `tokio::task::spawn_blocking`. An instance that is dropped without [`close`](Env::close)
/// (its task was cancelled, its holder panicked) must still free what it holds — kill its
/// processes in `Drop`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an environment: `#[tool(env = {Self})]` and \
               `#[reward(env = {Self})]` need `impl agentfly_core::env::Env for {Self}`",
    label = "not an `Env`",
    note = "an `Env` says how instances are created and reset, so chains can lease them from a pool"
)]
pub trait Env: Sized + Send + 'static {
    /// How instances are made (e.g. resource limits); one pool per config.
    type Config: Clone + Default + Send + Sync + DeserializeOwned + 'static;

    /// A fresh instance.
    fn create(config: &Self::Config) -> impl Future<Output = Result<Self, EnvError>> + Send;

    /// Back to a clean state. `sample` is the sample of the chain that is about to use the
    /// instance (its fields may set the scene), or `None` when it is returned to its pool.
    fn reset(
        &mut self,
        sample: Option<&Sample>,
    ) -> impl Future<Output = Result<(), EnvError>> + Send;

    /// Is the instance still usable? A failing one is closed and replaced.
    fn health_check(&mut self) -> impl Future<Output = Result<(), EnvError>> + Send {
        async { Ok(()) }
    }

    /// Frees the instance's resources.
    fn close(self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Implements [`Env`] for a type that is its own `Default`: created with
/// `Default::default()`, reset by replacing it with a fresh default, config `()`.
///
/// ```
/// #[derive(Default)]
/// struct Counter { total: i64 }
/// agentfly_core::default_env!(Counter);
/// ```
#[macro_export]
macro_rules! default_env {
    ($ty:ty) => {
        impl $crate::env::Env for $ty {
            type Config = ();

            async fn create(_: &()) -> ::core::result::Result<Self, $crate::env::EnvError> {
                ::core::result::Result::Ok(<$ty as ::core::default::Default>::default())
            }

            async fn reset(
                &mut self,
                _: ::core::option::Option<&$crate::Sample>,
            ) -> ::core::result::Result<(), $crate::env::EnvError> {
                *self = <$ty as ::core::default::Default>::default();
                ::core::result::Result::Ok(())
            }
        }
    };
}

/// An environment could not be created, reset or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EnvError {
    /// What went wrong.
    pub message: String,
}

impl EnvError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
