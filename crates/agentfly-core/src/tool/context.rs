//! The state one chain's tool calls and reward share: its environment instances.

use super::{ToolErrorKind, ToolFailure};
use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;

/// The per-chain state a call sees. Today it holds the environment instances that
/// stateful tools (`#[tool(env = T)]`) and rewards (`#[reward(env = T)]`) borrow; a
/// chain attaches the instances it leased, so its tools and its reward see the same state.
#[derive(Default)]
pub struct CallContext {
    envs: HashMap<TypeId, Box<dyn Any + Send>>,
}

/// A stateful tool or reward ran without an instance of its environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "needs an environment of type `{type_name}` but none is attached to this call; a chain \
     attaches the instance it leased (for a direct call use `CallContext::insert_env`)"
)]
pub struct MissingEnvironment {
    /// The Rust type that was asked for.
    pub type_name: &'static str,
}

impl From<MissingEnvironment> for ToolFailure {
    fn from(e: MissingEnvironment) -> Self {
        ToolFailure::new(ToolErrorKind::MissingEnvironment, e.to_string())
    }
}

impl CallContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches an environment instance, replacing (and returning) one of the same type.
    pub fn insert_env<T: Any + Send>(&mut self, env: T) -> Option<T> {
        self.envs
            .insert(TypeId::of::<T>(), Box::new(env))
            .and_then(|old| old.downcast::<T>().ok().map(|b| *b))
    }

    /// Detaches and returns the instance of `T`, if any.
    pub fn remove_env<T: Any + Send>(&mut self) -> Option<T> {
        self.take_env::<T>().ok().map(|b| *b)
    }

    /// Is an instance of `T` attached?
    pub fn has_env<T: Any + Send>(&self) -> bool {
        self.envs.contains_key(&TypeId::of::<T>())
    }

    /// The attached instance of `T`.
    pub fn env_mut<T: Any + Send>(&mut self) -> Result<&mut T, MissingEnvironment> {
        self.envs
            .get_mut(&TypeId::of::<T>())
            .and_then(|b| b.downcast_mut::<T>())
            .ok_or(MissingEnvironment {
                type_name: type_name::<T>(),
            })
    }

    /// Detaches the instance of `T` for a call on another thread; give it back with
    /// [`put_env_box`](Self::put_env_box). One that is never given back (the call timed
    /// out or panicked) is gone, so a half-changed instance is never reused.
    pub fn take_env<T: Any + Send>(&mut self) -> Result<Box<T>, MissingEnvironment> {
        self.envs
            .remove(&TypeId::of::<T>())
            .and_then(|b| b.downcast::<T>().ok())
            .ok_or(MissingEnvironment {
                type_name: type_name::<T>(),
            })
    }

    /// Re-attaches an instance detached by [`take_env`](Self::take_env).
    pub fn put_env_box<T: Any + Send>(&mut self, env: Box<T>) {
        self.envs.insert(TypeId::of::<T>(), env);
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("envs", &self.envs.len())
            .finish()
    }
}
