//! One MCP session: a server process (or an HTTP session) a chain holds, an [`Env`] its
//! pool leases and replaces.

use crate::config::{McpServerConfig, SESSION_DIR};
use agentfly_core::Sample;
use agentfly_core::env::{Env, EnvError};
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, Tool};
use rmcp::service::{ClientCacheConfig, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tempfile::TempDir;

/// A connected MCP client session. Stateful servers get one per chain: it is replaced by
/// a fresh one (a new process, a new session directory) before another chain uses it.
pub struct McpSession {
    client: RunningService<RoleClient, ()>,
    config: McpServerConfig,
    /// The session's directory (`{session_dir}`), removed with it.
    dir: Option<TempDir>,
    /// Has a chain called a tool on it since it started?
    used: AtomicBool,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("server", &self.config.name)
            .field("used", &self.used.load(Ordering::Relaxed))
            .finish()
    }
}

/// Why a call did not give a result: the session is gone (its process exited, it stopped
/// answering, it broke the protocol) or the server refused the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The session cannot be used any more.
    #[error("{0}")]
    Lost(String),
    /// The server answered the request with a protocol error (an unknown tool, bad
    /// arguments it refused before running).
    #[error("{0}")]
    Refused(String),
}

impl McpSession {
    /// Starts the server (or opens an HTTP session) and completes MCP's handshake, within
    /// the configuration's start timeout.
    pub async fn connect(config: &McpServerConfig) -> Result<Self, EnvError> {
        let error = |message: String| EnvError {
            message: format!(
                "MCP server `{}` ({}): {message}",
                config.name,
                config.describe()
            ),
        };
        let timeout = Duration::from_secs(config.start_timeout_secs);
        let (dir, connected) = match (&config.command, &config.url) {
            (Some(command), _) => {
                let dir = tempfile::Builder::new()
                    .prefix("agentfly-mcp-")
                    .tempdir()
                    .map_err(|e| error(format!("no session directory: {e}")))?;
                let here = dir.path().to_string_lossy().into_owned();
                let cwd = config.cwd.as_deref().unwrap_or(dir.path());
                if !cwd.is_dir() {
                    return Err(error(format!("`cwd` {} is not a directory", cwd.display())));
                }
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(config.args.iter().map(|a| a.replace(SESSION_DIR, &here)))
                    .envs(
                        config
                            .env
                            .iter()
                            .map(|(k, v)| (k, v.replace(SESSION_DIR, &here))),
                    )
                    .current_dir(cwd);
                let mut wrapped = CommandWrap::from(cmd);
                // Its own process group, killed whole: `npx` and the node it starts.
                wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
                let (transport, _) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| error(format!("cannot start `{command}`: {e}")))?;
                let connected = tokio::time::timeout(timeout, ().serve(transport)).await;
                (Some(dir), connected.map(|r| r.map_err(|e| e.to_string())))
            }
            (None, Some(url)) => {
                let transport = StreamableHttpClientTransport::from_uri(url.as_str());
                let connected = tokio::time::timeout(timeout, ().serve(transport)).await;
                (None, connected.map(|r| r.map_err(|e| e.to_string())))
            }
            (None, None) => return Err(error("neither `command` nor `url`".into())),
        };
        let client = match connected {
            Err(_) => {
                return Err(error(format!(
                    "no answer to MCP's `initialize` within {} s: is it an MCP server?",
                    config.start_timeout_secs
                )));
            }
            Ok(Err(e)) => return Err(error(format!("the MCP handshake failed: {e}"))),
            Ok(Ok(client)) => client,
        };
        // A cached tool list would hide a session that died.
        client
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        Ok(Self {
            client,
            config: config.clone(),
            dir,
            used: AtomicBool::new(false),
        })
    }

    /// The server's tools, every page of them.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, CallError> {
        let timeout = Duration::from_secs(self.config.call_timeout_secs);
        match tokio::time::timeout(timeout, self.client.list_all_tools()).await {
            Err(_) => Err(CallError::Lost(format!(
                "`tools/list` got no answer within {} s",
                self.config.call_timeout_secs
            ))),
            Ok(result) => result.map_err(classify),
        }
    }

    /// Calls `tool` with `arguments`. The caller bounds the wait; a call cut off at its
    /// timeout asks the server to cancel it.
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, CallError> {
        self.used.store(true, Ordering::Relaxed);
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        self.client.call_tool(params).await.map_err(classify)
    }

    /// Is the session still connected?
    pub fn is_alive(&self) -> bool {
        !self.client.is_transport_closed() && !self.client.is_closed()
    }

    /// Closes the session and stops its process (and the processes it started).
    pub async fn shutdown(self) {
        let _ = self.client.cancel().await;
        drop(self.dir);
    }
}

/// A failed request: a lost session, or the server's refusal.
fn classify(e: ServiceError) -> CallError {
    match e {
        ServiceError::McpError(data) => CallError::Refused(format!(
            "the server refused the call: {} (code {})",
            data.message, data.code.0
        )),
        other => CallError::Lost(format!("the session was lost: {other}")),
    }
}

impl Env for McpSession {
    type Config = McpServerConfig;

    async fn create(config: &McpServerConfig) -> Result<Self, EnvError> {
        Self::connect(config).await
    }

    /// Between chains a used session is replaced by a fresh one, so no chain sees what
    /// another left in a stateful server (a memory store's entities, a directory's files).
    async fn reset(&mut self, _sample: Option<&Sample>) -> Result<(), EnvError> {
        if self.used.load(Ordering::Relaxed) || !self.is_alive() {
            let fresh = Self::connect(&self.config).await?;
            let old = std::mem::replace(self, fresh);
            old.shutdown().await;
        }
        Ok(())
    }

    async fn health_check(&mut self) -> Result<(), EnvError> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(EnvError {
                message: format!("MCP server `{}`: its session closed", self.config.name),
            })
        }
    }

    async fn close(self) {
        self.shutdown().await;
    }
}
