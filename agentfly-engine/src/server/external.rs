//! Inference servers run by someone else — vLLM or SGLang on GPU machines — that the
//! trainer rolls out on and pushes each update's weights to, over HTTP
//! (`[rollout.servers]`). The trainer writes the policy in Hugging Face layout to a
//! directory the servers can read (a shared file system), then asks every server to load
//! it:
//!
//! - **SGLang**: `POST /update_weights_from_disk` with `{"model_path": …}`; the answer's
//!   `success` must be true (SGLang keeps its old weights on failure, and flushes its
//!   prefix cache on success).
//! - **vLLM**: `POST /collective_rpc` with `{"method": "reload_weights", "kwargs":
//!   {"weights_path": …}}`, then `POST /reset_prefix_cache` so no cached keys of the old
//!   weights are reused. Both are vLLM's development endpoints (`VLLM_SERVER_DEV_MODE=1`);
//!   `reload_weights` takes a path from vLLM 0.20.
//!
//! After each push every server scores a fixed probe, and its log-probabilities must be the
//! pushed weights' ([`super::probe`]): a server restarted by its supervisor on its launch
//! weights fails the push, with the difference.
//!
//! llama.cpp cannot take new weights without a restart: the trainer runs those servers
//! itself ([`super::LlamaServers`], `[rollout.llama_server]`).

use super::ServerApi;
use super::probe::{Probe, judge};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[rollout.servers]`: roll out on running vLLM or SGLang servers and push each update's
/// weights to them (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExternalServersConfig {
    /// The servers' base URLs, used in turn.
    pub urls: Vec<String>,
    /// Their API: `vllm` or `sglang`.
    pub api: ServerApi,
    /// The served model's name, sent to vLLM (default: its only model).
    pub model: Option<String>,
    /// Where the trainer writes each policy (`policy-NNNNNN/`, Hugging Face layout).
    /// Default: `served/` in the output directory.
    pub dir: Option<PathBuf>,
    /// The same directory as the servers see it, when they mount it elsewhere. Default:
    /// `dir`, made absolute.
    pub server_dir: Option<PathBuf>,
    /// The longest one generation request may take, in seconds.
    pub request_timeout_secs: u64,
    /// The longest a server may take to load new weights, in seconds.
    pub sync_timeout_secs: u64,
    /// Tokens of the probe every server scores after a push (0: no check).
    pub probe_tokens: usize,
    /// The mean absolute difference of the probe's log-probabilities, between a server's
    /// and the trainer's, past which a push fails (bf16 servers differ by ~0.01).
    pub probe_tolerance: f32,
    /// The environment variable holding the servers' API key, sent as `Authorization:
    /// Bearer …` with every request (the key itself is never written to a file).
    pub api_key_env: Option<String>,
}

impl Default for ExternalServersConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            api: ServerApi::Sglang,
            model: None,
            dir: None,
            server_dir: None,
            request_timeout_secs: 300,
            sync_timeout_secs: 600,
            probe_tokens: 256,
            probe_tolerance: 0.05,
            api_key_env: None,
        }
    }
}

/// A server did not take the new weights.
#[derive(Debug, thiserror::Error)]
#[error("weight sync: {0}")]
pub struct SyncError(pub String);

impl ExternalServersConfig {
    /// The API key from `api_key_env`, when one is named.
    pub fn api_key(&self) -> Result<Option<String>, SyncError> {
        let Some(name) = &self.api_key_env else {
            return Ok(None);
        };
        std::env::var(name).map(Some).map_err(|_| {
            SyncError(format!(
                "rollout.servers.api_key_env names `{name}`, which is not set"
            ))
        })
    }
}

/// Pushes written policies to running servers (see the module's documentation).
pub struct WeightSync {
    urls: Vec<String>,
    api: ServerApi,
    model: Option<String>,
    api_key: Option<String>,
    tolerance: f32,
    agent: ureq::Agent,
}

impl std::fmt::Debug for WeightSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightSync")
            .field("urls", &self.urls)
            .field("api", &self.api)
            .field("api_key", &self.api_key.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl WeightSync {
    /// For the servers of `config`; llama.cpp's cannot take new weights over HTTP.
    pub fn new(config: &ExternalServersConfig) -> Result<Self, SyncError> {
        if config.urls.is_empty() {
            return Err(SyncError("rollout.servers.urls is empty".into()));
        }
        if config.api == ServerApi::LlamaCpp {
            return Err(SyncError(
                "a llama.cpp server cannot load new weights over HTTP: use \
                 [rollout.llama_server], which runs the servers and restarts them on each \
                 policy"
                    .into(),
            ));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(config.sync_timeout_secs)))
            .build()
            .into();
        Ok(Self {
            urls: config.urls.clone(),
            api: config.api,
            model: config.model.clone(),
            api_key: config.api_key()?,
            tolerance: config.probe_tolerance,
            agent,
        })
    }

    /// Has every server score `probe` and checks it scores it as the pushed weights do
    /// (and not as the weights served before, `previous`); the first server that does not
    /// fails it with the difference. One line on how far the servers were, else.
    pub fn verify(&self, probe: &Probe, previous: Option<&[f32]>) -> Result<String, SyncError> {
        let Some((path, body)) = self.api.score_request(&probe.ids, self.model.as_deref()) else {
            return Ok(String::new());
        };
        let mut worst = 0.0f32;
        for url in &self.urls {
            let endpoint = format!("{}{path}", url.trim_end_matches('/'));
            let answer = self.post(&endpoint, &body)?;
            let scored = self
                .api
                .parse_score(&answer, &probe.ids)
                .map_err(|why| SyncError(format!("{url}: the probe: {why}")))?;
            let distance =
                judge(&scored, &probe.logprobs, previous, self.tolerance).map_err(|why| {
                    SyncError(format!("{url} does not serve the pushed policy: {why}"))
                })?;
            worst = worst.max(distance.mean);
        }
        Ok(format!(
            "every server scored the probe as the pushed weights (mean |Δ log p| ≤ {worst:.4})"
        ))
    }

    /// Has every server load the Hugging Face directory at `path` (as the servers see it).
    pub fn push(&self, path: &Path) -> Result<(), SyncError> {
        self.urls.iter().enumerate().try_for_each(|(i, url)| {
            self.push_to(url, path).map_err(|SyncError(why)| {
                let loaded = &self.urls[..i];
                SyncError(if loaded.is_empty() {
                    why
                } else {
                    format!(
                        "{why} (these servers already loaded it: {})",
                        loaded.join(", ")
                    )
                })
            })
        })
    }

    /// Has the server at `url` load the directory at `path`.
    fn push_to(&self, url: &str, path: &Path) -> Result<(), SyncError> {
        let path = path.to_string_lossy();
        let base = url.trim_end_matches('/');
        match self.api {
            ServerApi::Sglang => {
                let answer = self.post(
                    &format!("{base}/update_weights_from_disk"),
                    &json!({"model_path": path, "abort_all_requests": false}),
                )?;
                if answer["success"] != json!(true) {
                    return Err(SyncError(format!(
                        "{base} did not load {path}: {}",
                        answer["message"]
                    )));
                }
            }
            ServerApi::Vllm => {
                self.post(
                    &format!("{base}/collective_rpc"),
                    &json!({"method": "reload_weights", "kwargs": {"weights_path": path}}),
                )?;
                self.post(&format!("{base}/reset_prefix_cache"), &json!({}))?;
            }
            ServerApi::LlamaCpp => unreachable!("refused by WeightSync::new"),
        }
        Ok(())
    }

    /// POSTs `body` to `endpoint`: the answer's JSON (`null` for an empty body), or why
    /// the server refused.
    fn post(&self, endpoint: &str, body: &Value) -> Result<Value, SyncError> {
        let mut request = self
            .agent
            .post(endpoint)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = request
            .send(body.to_string())
            .map_err(|e| SyncError(format!("{endpoint}: {e}")))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string()
            .map_err(|e| SyncError(format!("{endpoint}: reading the answer: {e}")))?;
        let answer: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status != 200 {
            let hint = if status == 404 && self.api == ServerApi::Vllm {
                " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
            } else {
                ""
            };
            return Err(SyncError(format!(
                "{endpoint}: HTTP {status}{hint}: {}",
                self.api.error_message(&answer)
            )));
        }
        Ok(answer)
    }
}
