//! Registered `#[tool]` functions served to any MCP client: their schemas and
//! descriptions as MCP lists them, their error observations flagged `isError`, and a
//! stateful tool's environment leased per MCP session (one per stdio process).

use agentfly_core::env::EnvPools;
use agentfly_core::{CallContext, Toolbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::Mutex;

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
