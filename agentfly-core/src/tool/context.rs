//! The state one chain's tool calls and reward share: its environment instances.

use super::{ToolErrorKind, ToolFailure};
use crate::Sample;
use crate::env::{Env, EnvError, EnvPool, EnvPools, Lease, LeaseError};
use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;

/// The per-chain state a call sees: the environment instances that stateful tools
/// (`#[tool(env = T)]`) and rewards (`#[reward(env = T)]`) work on.
///
/// A chain's context holds the run's [`EnvPools`] and its sample: the first call that
/// needs an environment leases an instance, resets it with the sample, and keeps it until
/// the context is dropped, so every tool of the chain and its reward see the same
/// instance. An instance can also be attached directly with
/// [`insert_env`](Self::insert_env) (tests, one-off calls).
#[derive(Default)]
pub struct CallContext {
    envs: HashMap<TypeId, Box<dyn ErasedHandle>>,
    pools: Option<EnvPools>,
    sample: Option<Sample>,
    touched: Vec<TypeId>,
    /// Instances leased by name from pools their tools hold (see
    /// [`named_env`](Self::named_env)), and those the current call touched.
    named: HashMap<(TypeId, String), Box<dyn ErasedHandle>>,
    touched_named: Vec<(TypeId, String)>,
    /// Values other parts of the runtime keep with the chain (its toolbox, the calls made
    /// from inside tools), one per type.
    extensions: HashMap<TypeId, Box<dyn Any + Send>>,
}

/// A stateful tool or reward could not get its environment.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvUnavailable {
    /// No instance is attached and the context has no pools to lease one from.
    #[error(transparent)]
    Missing(#[from] MissingEnvironment),
    /// The pool gave none (timeout, creation failure).
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The leased instance could not be reset for this chain's sample.
    #[error("could not reset the `{env}` instance for sample `{sample}`: {source}")]
    Reset {
        /// The environment type.
        env: &'static str,
        /// The sample's id.
        sample: String,
        /// Why.
        source: EnvError,
    },
}

/// A stateful tool or reward ran without an instance of its environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "needs an environment of type `{type_name}` but none is attached to this call and there \
     is no pool to lease one from (a chain leases from its run's pools; for a direct call use \
     `CallContext::with_pools` or `CallContext::insert_env`)"
)]
pub struct MissingEnvironment {
    /// The Rust type that was asked for.
    pub type_name: &'static str,
}

impl From<EnvUnavailable> for ToolFailure {
    fn from(e: EnvUnavailable) -> Self {
        let kind = match e {
            EnvUnavailable::Missing(_) => ToolErrorKind::MissingEnvironment,
            _ => ToolErrorKind::EnvironmentUnavailable,
        };
        ToolFailure::new(kind, e.to_string())
    }
}

/// The place an environment instance is kept: owned outright, or leased from a pool.
trait EnvSlot<T>: Send {
    fn get(&mut self) -> &mut T;
    fn mark_broken(&mut self);
}

impl<T: Send> EnvSlot<T> for Box<T> {
    fn get(&mut self) -> &mut T {
        self
    }
    fn mark_broken(&mut self) {}
}

impl<T: Env> EnvSlot<T> for Lease<T> {
    fn get(&mut self) -> &mut T {
        self
    }
    fn mark_broken(&mut self) {
        Lease::mark_broken(self);
    }
}

/// An environment instance detached from its context for a call on another thread (see
/// [`CallContext::take_env`]); dropping it returns a leased instance to its pool.
pub struct EnvHandle<T: 'static> {
    slot: Box<dyn EnvSlot<T>>,
}

impl<T: 'static> EnvHandle<T> {
    /// The instance.
    pub fn get_mut(&mut self) -> &mut T {
        self.slot.get()
    }

    /// Marks a leased instance as not to be reused (no effect on an owned one).
    pub fn mark_broken(&mut self) {
        self.slot.mark_broken();
    }
}

impl<T: 'static> fmt::Debug for EnvHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvHandle<{}>", type_name::<T>())
    }
}

trait ErasedHandle: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    fn mark_broken(&mut self);
}

impl<T: 'static> ErasedHandle for EnvHandle<T> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
    fn mark_broken(&mut self) {
        EnvHandle::mark_broken(self);
    }
}

impl CallContext {
    /// An empty context: no pools, no sample, no instances.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context that leases environments from `pools` on first use.
    pub fn with_pools(pools: EnvPools) -> Self {
        Self {
            pools: Some(pools),
            ..Self::default()
        }
    }

    /// The chain's value of type `T` kept with it (see [`insert_extension`](Self::insert_extension)).
    pub(crate) fn extension<T: Any + Send>(&self) -> Option<&T> {
        self.extensions.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// The chain's value of type `T`, made with `Default` on first use.
    pub(crate) fn extension_mut<T: Any + Send + Default>(&mut self) -> &mut T {
        self.extensions
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()))
            .downcast_mut()
            .expect("keyed by its TypeId")
    }

    /// Keeps `value` with the chain, replacing one of its type.
    pub(crate) fn insert_extension<T: Any + Send>(&mut self, value: T) {
        self.extensions.insert(TypeId::of::<T>(), Box::new(value));
    }

    /// Sets the sample leased instances are reset with.
    pub fn set_sample(&mut self, sample: Sample) {
        self.sample = Some(sample);
    }

    /// Attaches an instance owned by the context, replacing one of the same type.
    pub fn insert_env<T: Any + Send>(&mut self, env: T) {
        self.insert_handle(EnvHandle {
            slot: Box::new(Box::new(env)),
        });
    }

    /// Attaches an instance leased by the caller, replacing one of the same type.
    pub fn insert_lease<T: Env>(&mut self, lease: Lease<T>) {
        self.insert_handle(EnvHandle {
            slot: Box::new(lease),
        });
    }

    fn insert_handle<T: 'static>(&mut self, handle: EnvHandle<T>) {
        self.envs.insert(TypeId::of::<T>(), Box::new(handle));
    }

    /// Is an instance of `T` attached?
    pub fn has_env<T: Any>(&self) -> bool {
        self.envs.contains_key(&TypeId::of::<T>())
    }

    /// The attached instance of `T` (never leases; see [`env`](Self::env)).
    pub fn env_mut<T: Any + Send>(&mut self) -> Result<&mut T, MissingEnvironment> {
        self.envs
            .get_mut(&TypeId::of::<T>())
            .and_then(|h| h.as_any_mut().downcast_mut::<EnvHandle<T>>())
            .map(EnvHandle::get_mut)
            .ok_or(MissingEnvironment {
                type_name: type_name::<T>(),
            })
    }

    /// The chain's instance of `T`, leased from the pools (and reset with the sample) on
    /// first use.
    pub async fn env<T: Env>(&mut self) -> Result<&mut T, EnvUnavailable> {
        self.ensure::<T>().await?;
        self.touched.push(TypeId::of::<T>());
        Ok(self.env_mut::<T>()?)
    }

    /// Detaches the chain's instance of `T` (leasing it first if needed) for a call on
    /// another thread; give it back with [`put_env`](Self::put_env). One that is never
    /// given back (the call timed out) goes back to its pool when it is dropped.
    pub async fn take_env<T: Env>(&mut self) -> Result<EnvHandle<T>, EnvUnavailable> {
        self.ensure::<T>().await?;
        self.touched.push(TypeId::of::<T>());
        let handle = self
            .envs
            .remove(&TypeId::of::<T>())
            .and_then(|h| h.into_any().downcast::<EnvHandle<T>>().ok())
            .ok_or(MissingEnvironment {
                type_name: type_name::<T>(),
            })?;
        Ok(*handle)
    }

    /// Re-attaches an instance detached by [`take_env`](Self::take_env).
    pub fn put_env<T: 'static>(&mut self, handle: EnvHandle<T>) {
        self.insert_handle(handle);
    }

    async fn ensure<T: Env>(&mut self) -> Result<(), EnvUnavailable> {
        if self.has_env::<T>() {
            return Ok(());
        }
        let pools = self.pools.as_ref().ok_or(MissingEnvironment {
            type_name: type_name::<T>(),
        })?;
        let pool = pools.get::<T>();
        let lease = lease_for_sample(&pool, self.sample.as_ref()).await?;
        self.insert_lease(lease);
        Ok(())
    }

    /// The chain's instance of `T` called `name`, leased from `pool` (and reset with the
    /// sample) on first use, and kept until the context is dropped: for tools whose pools
    /// are their own rather than the run's, one per name (the sessions of each MCP server).
    pub async fn named_env<T: Env>(
        &mut self,
        name: &str,
        pool: &EnvPool<T>,
    ) -> Result<&mut T, EnvUnavailable> {
        let key = (TypeId::of::<T>(), name.to_string());
        if !self.named.contains_key(&key) {
            let lease = lease_for_sample(pool, self.sample.as_ref()).await?;
            let handle: EnvHandle<T> = EnvHandle {
                slot: Box::new(lease),
            };
            self.named.insert(key.clone(), Box::new(handle));
        }
        self.touched_named.push(key.clone());
        Ok(self
            .named
            .get_mut(&key)
            .and_then(|h| h.as_any_mut().downcast_mut::<EnvHandle<T>>())
            .map(EnvHandle::get_mut)
            .expect("inserted above, keyed by its type"))
    }

    /// Detaches the chain's instance of `T` called `name` and marks it broken, so its pool
    /// replaces it (it crashed or stopped answering); the next call leases a fresh one.
    pub fn discard_named_env<T: Env>(&mut self, name: &str) {
        if let Some(mut handle) = self.named.remove(&(TypeId::of::<T>(), name.to_string())) {
            handle.mark_broken();
        }
    }

    /// Forgets which environments the next call touches.
    pub(crate) fn begin_call(&mut self) {
        self.touched.clear();
        self.touched_named.clear();
    }

    /// After a call that panicked or was cut off: the instances it touched may be
    /// half-changed, so they are detached, and leased ones are replaced in their pools.
    /// The chain's next call leases a fresh instance.
    pub(crate) fn discard_touched(&mut self) {
        for id in std::mem::take(&mut self.touched) {
            if let Some(mut handle) = self.envs.remove(&id) {
                handle.mark_broken();
            }
        }
        for key in std::mem::take(&mut self.touched_named) {
            if let Some(mut handle) = self.named.remove(&key) {
                handle.mark_broken();
            }
        }
    }
}

/// A lease from `pool`, reset with the chain's `sample` (one that cannot be reset is marked
/// broken, so its pool replaces it).
async fn lease_for_sample<T: Env>(
    pool: &EnvPool<T>,
    sample: Option<&Sample>,
) -> Result<Lease<T>, EnvUnavailable> {
    let mut lease = pool.lease().await?;
    if let Some(sample) = sample
        && let Err(source) = lease.reset(Some(sample)).await
    {
        lease.mark_broken();
        return Err(EnvUnavailable::Reset {
            env: type_name::<T>(),
            sample: sample.id.clone(),
            source,
        });
    }
    Ok(lease)
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("envs", &(self.envs.len() + self.named.len()))
            .field("pools", &self.pools.is_some())
            .field("sample", &self.sample.as_ref().map(|s| &s.id))
            .finish()
    }
}
