//! MCP servers' tools as agentfly tools: found once at start-up, then called in each
//! chain's own session.

use crate::config::McpServerConfig;
use crate::session::{CallError, McpSession};
use agentfly_core::env::{EnvPool, PoolConfig};
use agentfly_core::tool::{
    CallContext, DynamicTool, ToolErrorKind, ToolFailure, ToolFuture, ToolOptions,
};
use agentfly_core::{Observation, ToolSpec, Toolbox};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Servers could not be used: the message names the server and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpError(pub String);

/// How a server's sessions are held.
enum Access {
    /// One session per chain, from a pool.
    Pooled(EnvPool<McpSession>),
    /// One session for every chain, replaced when it is lost.
    Shared(Mutex<Option<Arc<McpSession>>>),
}

/// A server the tools of which joined the toolbox.
struct Server {
    config: McpServerConfig,
    access: Access,
}

impl Server {
    /// Calls `tool` in the chain's session (or the shared one). A lost session is given up:
    /// the pool replaces it, and the failure says the environment was lost.
    async fn call(
        &self,
        ctx: &mut CallContext,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, ToolFailure> {
        let timeout = Duration::from_secs(self.config.call_timeout_secs);
        let lost = |message: String| {
            ToolFailure::new(
                ToolErrorKind::EnvironmentLost,
                format!("MCP server `{}`: {message}", self.config.name),
            )
        };
        let outcome = match &self.access {
            Access::Pooled(pool) => {
                let session = ctx.named_env(&self.config.name, pool).await?;
                tokio::time::timeout(timeout, session.call(tool, arguments)).await
            }
            Access::Shared(current) => {
                let session = {
                    let mut current = current.lock().await;
                    match current.as_ref().filter(|s| s.is_alive()) {
                        Some(session) => session.clone(),
                        None => {
                            let session = Arc::new(
                                McpSession::connect(&self.config)
                                    .await
                                    .map_err(|e| lost(e.message))?,
                            );
                            *current = Some(session.clone());
                            session
                        }
                    }
                };
                tokio::time::timeout(timeout, session.call(tool, arguments)).await
            }
        };
        let forget = |ctx: &mut CallContext| {
            if matches!(self.access, Access::Pooled(_)) {
                ctx.discard_named_env::<McpSession>(&self.config.name);
            }
        };
        match outcome {
            Err(_) => {
                forget(ctx);
                if let Access::Shared(current) = &self.access {
                    current.lock().await.take();
                }
                Err(lost(format!(
                    "`{tool}` got no answer within {} s (call_timeout_secs)",
                    self.config.call_timeout_secs
                )))
            }
            Ok(Err(CallError::Lost(message))) => {
                forget(ctx);
                Err(lost(message))
            }
            Ok(Err(CallError::Refused(message))) => {
                Err(ToolFailure::new(ToolErrorKind::ToolError, message))
            }
            Ok(Ok(result)) => Ok(result),
        }
    }
}

/// One of a server's tools.
struct McpTool {
    server: Arc<Server>,
    name: String,
    schema: JsonObject,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "McpTool({} of `{}`)", self.name, self.server.config.name)
    }
}

impl DynamicTool for McpTool {
    fn parameters(&self) -> Value {
        Value::Object(self.schema.clone())
    }

    fn invoke<'a>(&'a self, ctx: &'a mut CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let arguments = match args {
                Value::Object(map) => map,
                Value::Null => JsonObject::new(),
                other => {
                    return Err(ToolFailure::new(
                        ToolErrorKind::InvalidArguments,
                        format!("the arguments must be a JSON object, not {other}"),
                    ));
                }
            };
            let result = self.server.call(ctx, &self.name, arguments).await?;
            let text = render(&result);
            if result.is_error == Some(true) {
                Err(ToolFailure::new(ToolErrorKind::ToolError, text))
            } else {
                Ok(Observation::text(text))
            }
        })
    }
}

/// What a model reads of a result: its text, and a line for each other kind of content.
pub fn render(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
                other => format!("[a resource: {}]", resource_uri(other)),
            },
            ContentBlock::ResourceLink(link) => format!("[a resource: {}]", link.uri),
            _ => "[content of a kind agentfly does not read]".to_string(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    parts.join("\n")
}

fn resource_uri(contents: &rmcp::model::ResourceContents) -> String {
    match contents {
        rmcp::model::ResourceContents::TextResourceContents { uri, .. } => uri.clone(),
        rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => uri.clone(),
        _ => "?".to_string(),
    }
}

/// The servers of a run and the tools they bring. Dropping it (or
/// [`close`](Self::close)) stops their sessions.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
    tools: Vec<&'static ToolSpec>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|t| t.name).collect();
        f.debug_struct("McpServers").field("tools", &names).finish()
    }
}

impl McpServers {
    /// Starts a session of each server, lists its tools and checks them: a server that
    /// cannot be started or does not speak MCP, one that lists no tools, a `tools` entry it
    /// does not have, or a schema that is not an object is refused, naming the server.
    pub async fn start(configs: &[McpServerConfig]) -> Result<Self, McpError> {
        let mut servers = Vec::new();
        let mut tools = Vec::new();
        for config in configs {
            config.validate().map_err(|e| McpError(e.to_string()))?;
            if let Some(clash) = servers
                .iter()
                .find(|s: &&Arc<Server>| s.config.name == config.name)
            {
                return Err(McpError(format!(
                    "two MCP servers are named `{}` ({} and {})",
                    config.name,
                    clash.config.describe(),
                    config.describe()
                )));
            }
            let first = McpSession::connect(config)
                .await
                .map_err(|e| McpError(e.message))?;
            let listed = first
                .list_tools()
                .await
                .map_err(|e| McpError(format!("MCP server `{}`: {e}", config.name)))?;
            let chosen = choose(config, listed)?;
            let access = if config.shared {
                Access::Shared(Mutex::new(Some(Arc::new(first))))
            } else {
                first.shutdown().await;
                Access::Pooled(EnvPool::new(
                    config.clone(),
                    PoolConfig {
                        capacity: config.max_sessions,
                        ..PoolConfig::default()
                    },
                ))
            };
            let server = Arc::new(Server {
                config: config.clone(),
                access,
            });
            for tool in chosen {
                tools.push(spec(&server, tool));
            }
            servers.push(server);
        }
        Ok(Self { servers, tools })
    }

    /// The tools, server by server in the order each lists them.
    pub fn tools(&self) -> &[&'static ToolSpec] {
        &self.tools
    }

    /// `toolbox` with these tools added; a name already there is refused, naming both.
    pub fn extend(&self, toolbox: Toolbox) -> Result<Toolbox, McpError> {
        toolbox
            .with_added(self.tools.clone())
            .map_err(|e| McpError(e.to_string()))
    }

    /// Stops every session.
    pub async fn close(&self) {
        for server in &self.servers {
            match &server.access {
                Access::Pooled(pool) => pool.close().await,
                Access::Shared(current) => {
                    if let Some(session) = current.lock().await.take()
                        && let Ok(session) = Arc::try_unwrap(session)
                    {
                        session.shutdown().await;
                    }
                }
            }
        }
    }
}

/// The tools of `listed` the configuration takes, checked.
fn choose(config: &McpServerConfig, listed: Vec<Tool>) -> Result<Vec<Tool>, McpError> {
    let error = |message: String| McpError(format!("MCP server `{}`: {message}", config.name));
    if listed.is_empty() {
        return Err(error("it lists no tools".into()));
    }
    let chosen = match &config.tools {
        None => listed,
        Some(names) => {
            let mut chosen = Vec::new();
            for name in names {
                match listed.iter().find(|t| t.name == name.as_str()) {
                    Some(tool) => chosen.push(tool.clone()),
                    None => {
                        let known: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
                        return Err(error(format!(
                            "it has no tool `{name}`; it has: {}",
                            known.join(", ")
                        )));
                    }
                }
            }
            chosen
        }
    };
    for tool in &chosen {
        let kind = tool.input_schema.get("type").and_then(Value::as_str);
        if kind != Some("object") {
            return Err(error(format!(
                "the input schema of `{}` is not a JSON Schema of an object (its type is {}), \
                 so no call format can pass it arguments",
                tool.name,
                kind.map_or("missing".to_string(), |k| format!("`{k}`"))
            )));
        }
    }
    Ok(chosen)
}

/// The spec of one of `server`'s tools (leaked, as registered tools are static).
fn spec(server: &Arc<Server>, tool: Tool) -> &'static ToolSpec {
    let config = &server.config;
    let description = tool
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map_or_else(
            || {
                format!(
                    "The `{}` tool of the MCP server `{}`.",
                    tool.name, config.name
                )
            },
            str::to_string,
        );
    // The toolbox's own timeout is a backstop: the call's own, shorter, ends the session.
    let options = ToolOptions {
        max_output_chars: None,
        terminal: false,
        timeout_ms: Some((config.call_timeout_secs + 5) * 1000),
        env: None,
    };
    let origin = agentfly_core::origin::Origin {
        module_path: Box::leak(format!("MCP server `{}`", config.name).into_boxed_str()),
        file: Box::leak(config.describe().into_boxed_str()),
        line: 0,
    };
    let name = tool.name.to_string();
    ToolSpec::dynamic(
        name.clone(),
        description,
        options,
        origin,
        Box::new(McpTool {
            server: server.clone(),
            name,
            schema: (*tool.input_schema).clone(),
        }),
    )
}
