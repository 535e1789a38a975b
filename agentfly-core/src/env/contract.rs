//! The [`Env`] contract: what an environment type implements (create from a config, reset
//! with the sample, health check, close), and [`EnvError`].

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
