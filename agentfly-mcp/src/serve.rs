//! Registered `#[tool]` functions served to any MCP client: their schemas and
//! descriptions as MCP lists them, their error observations flagged `isError`, and a
//! stateful tool's environment leased per MCP session: one per stdio process
//! ([`serve_stdio`]), one per `Mcp-Session-Id` over streamable HTTP ([`serve_http`]).

use agentfly_core::env::EnvPools;
use agentfly_core::{CallContext, Toolbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// An MCP server of a toolbox's tools, one per MCP session: the calls of a session share
/// its [`CallContext`], so a stateful tool keeps its environment instance for the whole
/// session (leased from `pools`) and no other session sees it.
#[derive(Clone)]
pub struct ToolServer {
    toolbox: Toolbox,
    ctx: Arc<Mutex<CallContext>>,
}

impl std::fmt::Debug for ToolServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolServer")
            .field("tools", &self.toolbox.names())
            .finish()
    }
}

impl ToolServer {
    /// A session's server of `toolbox`'s tools, leasing environments from `pools`.
    pub fn new(toolbox: Toolbox, pools: EnvPools) -> Self {
        Self {
            toolbox,
            ctx: Arc::new(Mutex::new(CallContext::with_pools(pools))),
        }
    }

    fn tools(&self) -> Vec<Tool> {
        self.toolbox
            .tools()
            .iter()
            .map(|spec| {
                let schema: JsonObject = match spec.parameters_schema() {
                    Value::Object(map) => map,
                    _ => JsonObject::new(),
                };
                Tool::new(spec.name, spec.description, schema)
            })
            .collect()
    }
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentfly", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "agentfly tools: each call's result is the tool's observation, flagged isError \
                 when the call failed",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.toolbox.get(&request.name).is_none() {
            return Err(ErrorData::invalid_params(
                format!(
                    "there is no tool named `{}`; this server has: {}",
                    request.name,
                    self.toolbox.names().join(", ")
                ),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let mut ctx = self.ctx.lock().await;
        let observation = self.toolbox.call(&mut ctx, &request.name, args).await;
        let content = vec![ContentBlock::text(observation.text)];
        Ok(if observation.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }
}

/// Serves `toolbox` over this process's stdin and stdout until the client closes them
/// (one MCP session). Nothing else may write to stdout meanwhile.
pub async fn serve_stdio(toolbox: Toolbox, pools: EnvPools) -> Result<(), crate::McpError> {
    let running = ToolServer::new(toolbox, pools.clone())
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| crate::McpError(format!("the MCP handshake failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| crate::McpError(format!("the MCP session failed: {e}")))?;
    pools.close().await;
    Ok(())
}

/// A streamable-HTTP MCP server of a toolbox's tools, running on the runtime it was
/// started on until [`shutdown`](Self::shutdown) (or dropped, which stops it too).
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    pools: EnvPools,
}

/// Serves `toolbox` over streamable HTTP at `http://ADDR/mcp` (port 0 picks a free one:
/// see [`HttpServer::url`]). Each MCP session (`Mcp-Session-Id`, the handshake of every
/// client speaking a protocol version with sessions) gets its own [`ToolServer`], so a
/// stateful tool keeps its environment for that session and no other sees it; an idle
/// session is closed after 5 minutes and its environments go back to `pools`. A client of
/// the session-less protocol (2026-07-28) gets a fresh context per request: its stateful
/// tools start from a reset environment on every call.
///
/// Bound to a loopback address, only `localhost`, `127.0.0.1` and `::1` are accepted as
/// the `Host` (against DNS rebinding); bound to any other address, any host is.
pub async fn serve_http(
    toolbox: Toolbox,
    pools: EnvPools,
    addr: SocketAddr,
) -> Result<HttpServer, crate::McpError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| crate::McpError(format!("cannot listen on {addr}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| crate::McpError(format!("cannot listen on {addr}: {e}")))?;
    let cancel = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = cancel.child_token();
    if !addr.ip().is_loopback() {
        config = config.disable_allowed_hosts();
    }
    let factory = {
        let pools = pools.clone();
        move || Ok(ToolServer::new(toolbox.clone(), pools.clone()))
    };
    let service =
        StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let stop = cancel.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await
    });
    Ok(HttpServer {
        addr,
        cancel,
        task: Some(task),
        pools,
    })
}

impl HttpServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint a client connects to: `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Runs until the server fails (it does not stop on its own otherwise).
    pub async fn wait(mut self) -> Result<(), crate::McpError> {
        let task = self.task.take().expect("taken only here or on shutdown");
        let served = task
            .await
            .map_err(|e| crate::McpError(format!("the MCP HTTP server stopped: {e}")))?;
        served.map_err(|e| crate::McpError(format!("the MCP HTTP server failed: {e}")))
    }

    /// Stops accepting, ends every session, and closes the environments they leased.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.pools.close().await;
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
