//! What the endpoint's handlers share: its bounds, the model, the policy and the sessions.

use crate::model::ChatModel;
use crate::session::Session;
use agentfly_core::rollout::Policy;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The endpoint's bounds and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// The largest request body, in bytes.
    pub max_request_bytes: usize,
    /// The most sessions kept at once.
    pub max_sessions: usize,
    /// A session unused this long is forgotten.
    pub session_idle: Duration,
    /// The longest a request waits for a generation slot before a 503.
    pub queue_wait: Duration,
    /// The most generations at once (the engine batches them).
    pub max_concurrent: usize,
    /// The most choices (`n`) per request.
    pub max_n: usize,
    /// The most trajectories one session records (a client that rewrites its history at
    /// every request starts one each time).
    pub max_session_trajectories: usize,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    /// When set, requests need `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: 8 << 20,
            max_sessions: 1024,
            session_idle: Duration::from_secs(900),
            queue_wait: Duration::from_secs(600),
            max_concurrent: 64,
            max_n: 16,
            max_session_trajectories: 256,
            default_max_tokens: 1024,
            api_key: None,
        }
    }
}

/// What every handler shares.
pub(crate) struct Inner {
    pub(crate) model: ChatModel,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) config: ServeConfig,
    pub(crate) sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
    pub(crate) slots: Semaphore,
    pub(crate) ids: AtomicU64,
    pub(crate) started: u64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long since `t`, in seconds.
pub(crate) fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}
