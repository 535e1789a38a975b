//! Rollouts on inference servers: [`ServerPolicy`] is a [`Policy`] over llama.cpp's
//! `llama-server`, vLLM or SGLang ([`ServerApi`]), token ids in and token ids with their
//! log-probabilities out, so token-in/token-out holds as with the built-in engine. Several
//! servers are used in turn; every request has a deadline, and one that cannot connect,
//! times out or finds the server busy (HTTP 503) is retried on the next server, a bounded
//! number of times. What each API is asked for, and what its log-probabilities mean, is in
//! [`api`].
//!
//! [`WeightSync`] pushes each update's weights to vLLM or SGLang servers run by someone
//! else (`[rollout.servers]`), written in Hugging Face layout where they can read them.
//! [`LlamaServers`] runs the servers itself, for training: it starts them on a GGUF the
//! trainer wrote and restarts them on each new policy's GGUF (a weight update); the
//! policy's version ([`ServerPolicy::set_policy_version`]) is recorded in every generation.

pub mod api;
mod external;
mod llama;
pub mod probe;

pub use api::ServerApi;
pub use external::{ExternalServersConfig, SyncError, WeightSync};
pub use llama::{LlamaServerConfig, LlamaServers};

use crate::sync::lock;
use agentfly_core::rollout::{GenerateRequest, Generated, Policy, PolicyError};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which servers, and how long to wait for them.
#[derive(Clone, PartialEq)]
pub struct ServerConfig {
    /// The servers' base URLs (e.g. `http://127.0.0.1:8080`), used in turn.
    pub urls: Vec<String>,
    /// The API they speak.
    pub api: ServerApi,
    /// The served model's name, sent to vLLM (optional there; its only model when absent).
    pub model: Option<String>,
    /// The longest one request may take.
    pub request_timeout: Duration,
    /// How many times a request that could not connect or timed out is tried again (each
    /// time on the next server).
    pub retries: usize,
    /// The largest answer read, in bytes.
    pub max_answer_bytes: u64,
    /// Sent as `Authorization: Bearer …` with every request, when set.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("urls", &self.urls)
            .field("api", &self.api)
            .field("model", &self.model)
            .field("request_timeout", &self.request_timeout)
            .field("retries", &self.retries)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            api: ServerApi::default(),
            model: None,
            request_timeout: Duration::from_secs(120),
            retries: 2,
            max_answer_bytes: 16 << 20,
            api_key: None,
        }
    }
}

/// What the servers have done so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ServerStats {
    /// Requests answered.
    pub requests: u64,
    /// Attempts that failed and were retried.
    pub retries: u64,
    /// Requests that failed for good.
    pub failures: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Summed seconds of the answered requests.
    pub seconds: f64,
    /// Why the last failed request failed.
    pub last_failure: Option<String>,
}

/// A [`Policy`] over inference servers (see the module's documentation).
#[derive(Debug, Clone)]
pub struct ServerPolicy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ServerConfig,
    agent: ureq::Agent,
    next: AtomicUsize,
    stats: Mutex<ServerStats>,
    /// The version of the weights the servers serve.
    version: AtomicU64,
}

/// Why one attempt failed: worth another server, or not.
enum Failure {
    Retry(String),
    Fatal(String),
}

impl ServerPolicy {
    /// A policy over `config.urls` (at least one).
    pub fn new(config: ServerConfig) -> Result<Self, PolicyError> {
        if config.urls.is_empty() {
            return Err(PolicyError("a server policy needs at least one URL".into()));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(config.request_timeout))
            .build()
            .into();
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                agent,
                next: AtomicUsize::new(0),
                stats: Mutex::new(ServerStats::default()),
                version: AtomicU64::new(0),
            }),
        })
    }

    /// What the servers have done so far.
    pub fn stats(&self) -> ServerStats {
        lock(&self.inner.stats).clone()
    }

    /// The servers now serve the weights of `version`: later generations say so. Set it
    /// once the servers have taken the new weights and before the next request.
    pub fn set_policy_version(&self, version: u64) {
        self.inner.version.store(version, Ordering::SeqCst);
    }
}

#[agentfly_core::async_trait]
impl Policy for ServerPolicy {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.generate(&request))
            .await
            .map_err(|e| PolicyError(format!("the server request's task failed: {e}")))?
    }
}

impl Inner {
    fn generate(&self, request: &GenerateRequest) -> Result<Generated, PolicyError> {
        let body = self
            .config
            .api
            .body(request, self.config.model.as_deref())
            .to_string();
        let start = Instant::now();
        let mut why = String::new();
        // Requests start on the servers in turn; a retry goes on to the next server, so
        // every server is tried before any is tried twice.
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..=self.config.retries {
            let url = &self.config.urls[(first + attempt) % self.config.urls.len()];
            match self.attempt(url, &body, &request.stop_ids) {
                Ok(mut generated) => {
                    generated.policy_version = self.version.load(Ordering::SeqCst);
                    let mut stats = lock(&self.stats);
                    stats.requests += 1;
                    stats.generated_tokens += generated.ids.len() as u64;
                    stats.seconds += start.elapsed().as_secs_f64();
                    return Ok(generated);
                }
                Err(Failure::Fatal(e)) => return Err(self.failed(format!("{url}: {e}"))),
                Err(Failure::Retry(e)) => {
                    why = format!("{url}: {e}");
                    if attempt < self.config.retries {
                        lock(&self.stats).retries += 1;
                    }
                }
            }
        }
        let why = format!(
            "no server answered after {} attempts; the last: {why}",
            self.config.retries + 1
        );
        Err(self.failed(why))
    }

    /// Counts a request that failed for good, remembers why, and gives its error.
    fn failed(&self, why: String) -> PolicyError {
        let mut stats = lock(&self.stats);
        stats.failures += 1;
        stats.last_failure = Some(why.clone());
        PolicyError(why)
    }

    fn attempt(&self, url: &str, body: &str, stop_ids: &[u32]) -> Result<Generated, Failure> {
        let api = self.config.api;
        let endpoint = format!("{}{}", url.trim_end_matches('/'), api.endpoint());
        let mut request = self
            .agent
            .post(&endpoint)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = request.send(body).map_err(|e| match e {
            ureq::Error::Timeout(_) => Failure::Retry(format!(
                "no answer within {:.0?}",
                self.config.request_timeout
            )),
            other => Failure::Retry(other.to_string()),
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(self.config.max_answer_bytes)
            .read_to_string()
            .map_err(|e| Failure::Retry(format!("reading the answer: {e}")))?;
        let answer: Value = serde_json::from_str(&text).map_err(|e| {
            let shown: String = text.chars().take(200).collect();
            Failure::Fatal(format!("the answer is not JSON ({e}): {shown:?}"))
        })?;
        match status {
            200 => api.parse(&answer, stop_ids).map_err(Failure::Fatal),
            // Busy or restarting (a weight update): another server, or later.
            503 => Err(Failure::Retry(format!(
                "HTTP 503: {}",
                api.error_message(&answer)
            ))),
            _ => Err(Failure::Fatal(format!(
                "HTTP {status}: {}",
                api.error_message(&answer)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_is_not_there_is_retried_then_named() {
        let policy = ServerPolicy::new(ServerConfig {
            // Port 9 (discard) on localhost: nothing listens.
            urls: vec!["http://127.0.0.1:9".into(), "http://127.0.0.1:9/".into()],
            request_timeout: Duration::from_secs(2),
            retries: 2,
            ..ServerConfig::default()
        })
        .unwrap();
        let request = GenerateRequest {
            context: vec![1, 2, 3],
            max_new_tokens: 4,
            stop_ids: vec![],
            stop_strings: vec![],
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        };
        let err = policy.inner.generate(&request).unwrap_err();
        assert!(
            err.0.contains("no server answered after 3 attempts"),
            "{err}"
        );
        let stats = policy.stats();
        assert_eq!((stats.retries, stats.failures, stats.requests), (2, 1, 0));
    }
}
