//! How a remote environment's instances reach their server, and why a call fails.

use agentfly_core::env::duration_secs;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How instances reach their server.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteConfig {
    /// The server to start for each instance: program and arguments, e.g.
    /// `["python3", "my_world.py"]`; `{worlds}` stands for the folder of the ready world
    /// servers (`serve_textworld_express.py`, `serve_scienceworld.py`; see [`RemoteConfig::world`]).
    /// Empty when `url` is set.
    pub command: Vec<String>,
    /// Or the base URL of a running server (HTTP), e.g. `http://127.0.0.1:8000`; each
    /// instance is one `create` on it.
    pub url: Option<String>,
    /// The environment's own configuration, passed to its `create` (e.g. the game type).
    pub config: Value,
    /// Extra environment variables for a started server.
    pub env: BTreeMap<String, String>,
    /// The working directory of a started server.
    pub cwd: Option<PathBuf>,
    /// The longest a server may take to start and answer `hello` and `create` (a JVM takes
    /// seconds).
    #[serde(with = "duration_secs")]
    pub start_timeout: Duration,
    /// The longest one `reset` or `step` may take.
    #[serde(with = "duration_secs")]
    pub call_timeout: Duration,
    /// The largest answer read from a server, in bytes.
    pub max_message_bytes: u64,
    /// The token an HTTP server requires (its `AGENTFLY_REMOTE_TOKEN`), sent as
    /// `Authorization: Bearer …`; by default `$AGENTFLY_REMOTE_TOKEN` here. Never written
    /// out with the configuration.
    #[serde(skip_serializing)]
    pub token: Option<String>,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("command", &self.command)
            .field("url", &self.url)
            .field("config", &self.config)
            .field("env", &self.env)
            .field("cwd", &self.cwd)
            .field("start_timeout", &self.start_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            url: None,
            config: json!({}),
            env: BTreeMap::new(),
            cwd: None,
            start_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(30),
            max_message_bytes: 1 << 20,
            token: None,
        }
    }
}

impl RemoteConfig {
    /// One of the ready world servers — `"textworld_express"` or `"scienceworld"` (their
    /// settings are in `agentfly-envs/python/worlds/`) — run by `python`, which must have
    /// the world's PyPI package (`scripts/setup` makes `.venv-worlds` with both).
    pub fn world(python: impl Into<PathBuf>, world: &str, config: Value) -> RemoteConfig {
        RemoteConfig {
            command: vec![
                python.into().display().to_string(),
                format!("{{worlds}}/serve_{world}.py"),
            ],
            config,
            ..RemoteConfig::default()
        }
    }
}

/// Why a call to the server failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The configuration names no server, or two.
    #[error("remote environment misconfigured: {0}")]
    Config(String),
    /// The server could not be started.
    #[error("the environment server could not start: {0}")]
    Start(String),
    /// The server did not answer in time; it is killed and the instance lost.
    #[error("the environment server did not answer `{method}` within {:.1} s", after.as_secs_f64())]
    Timeout {
        /// The request.
        method: String,
        /// The limit.
        after: Duration,
    },
    /// The server is gone (exited, closed its output, sent garbage); the instance is lost.
    #[error("the environment server is gone: {0}")]
    Lost(String),
    /// The server answered with an error (the environment raised, or the request was not
    /// one it takes); the instance stays usable.
    #[error("the environment refused `{method}`: {message}")]
    Server {
        /// The request.
        method: String,
        /// The error's message (e.g. `ValueError: no such object`).
        message: String,
        /// The server-side traceback, when it sent one.
        traceback: Option<String>,
    },
}

impl RemoteError {
    /// Is the instance unusable after this (crash, timeout, garbage)?
    pub fn is_fatal(&self) -> bool {
        !matches!(self, RemoteError::Server { .. })
    }
}
