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

mod contract;
pub mod duration_secs;
mod pool;
mod set;

pub use contract::{Env, EnvError};
pub use pool::{EnvPool, Lease, LeaseError, PoolConfig, PoolMetrics};
pub use set::EnvPools;
