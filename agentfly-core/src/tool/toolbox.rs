//! A set of registered tools, chosen by name, called safely from JSON.

use super::invoke::{failed, invoke};
use super::{CallContext, Observation, ToolErrorKind, ToolFailure, ToolSpec};
use crate::registry::{self, RegistryError};
use serde_json::Value;
use std::time::Duration;

/// The tools a chain may call. Every call ends with an [`Observation`], whatever the
/// model sent and whatever the tool did: invalid JSON, bad arguments, an unknown name, an
/// `Err`, a panic and a timeout each become an error observation the model can read.
#[derive(Debug, Clone)]
pub struct Toolbox {
    tools: Vec<&'static ToolSpec>,
    default_timeout: Duration,
}

impl Toolbox {
    /// The timeout of a tool that sets no `timeout_ms`.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// Every tool linked into this binary, sorted by name. Fails when two tools share a
    /// name, naming both origins.
    pub fn all() -> Result<Self, RegistryError> {
        Ok(Self::with_tools(registry::tools()?))
    }

    /// The tools named, in the order given. An unknown name fails with the list of known
    /// ones.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, RegistryError> {
        let all = registry::tools()?;
        let tools = registry::select(
            &all,
            names,
            |t| t.name,
            |name, known| RegistryError::UnknownTool { name, known },
        )?;
        Ok(Self::with_tools(tools))
    }

    /// A toolbox of exactly these tools, in this order.
    pub fn from_specs(tools: Vec<&'static ToolSpec>) -> Self {
        Self::with_tools(tools)
    }

    /// This toolbox with `tools` added after its own (tools found at run time: an MCP
    /// server's). A name already in the toolbox, or given twice, is refused, naming both.
    pub fn with_added(mut self, tools: Vec<&'static ToolSpec>) -> Result<Self, RegistryError> {
        for tool in tools {
            if let Some(first) = self.get(tool.name) {
                return Err(RegistryError::ClashingTool {
                    name: tool.name.to_string(),
                    first: first.origin,
                    second: tool.origin,
                });
            }
            self.tools.push(tool);
        }
        Ok(self)
    }

    /// This toolbox's settings with only `tools`.
    pub(crate) fn with_only(&self, tools: Vec<&'static ToolSpec>) -> Self {
        Self {
            tools,
            default_timeout: self.default_timeout,
        }
    }

    fn with_tools(tools: Vec<&'static ToolSpec>) -> Self {
        Self {
            tools,
            default_timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// Sets the timeout of tools that set no `timeout_ms`.
    pub fn with_default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The tools, in order.
    pub fn tools(&self) -> &[&'static ToolSpec] {
        &self.tools
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.name).collect()
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&'static ToolSpec> {
        self.tools.iter().copied().find(|t| t.name == name)
    }

    /// No tools at all?
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The schemas of the tools in the OpenAI function-calling shape, as chat templates
    /// take them in `tools`.
    pub fn schemas(&self) -> Vec<Value> {
        self.tools.iter().map(|t| t.schema()).collect()
    }

    /// Calls `name` with arguments given as JSON text, in a fresh [`CallContext`].
    /// Needs a tokio runtime (with timers); see [`call_json_blocking`](Self::call_json_blocking).
    pub async fn call_json(&self, name: &str, args_json: &str) -> Observation {
        self.call_json_in(&mut CallContext::new(), name, args_json)
            .await
    }

    /// Calls `name` with arguments given as JSON text, in the chain's `ctx`.
    pub async fn call_json_in(
        &self,
        ctx: &mut CallContext,
        name: &str,
        args_json: &str,
    ) -> Observation {
        let args = if args_json.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(args_json) {
                Ok(value) => value,
                Err(e) => {
                    return failed(
                        name,
                        ToolFailure::new(
                            ToolErrorKind::InvalidJson,
                            format!("the arguments are not valid JSON ({e}); send one JSON object"),
                        ),
                    );
                }
            }
        };
        self.call(ctx, name, args).await
    }

    /// Calls `name` with parsed arguments, in the chain's `ctx`. A context that has no
    /// toolbox yet gets this one: a tool that calls other tools (code-as-action) calls
    /// those of the toolbox it was called through.
    pub async fn call(&self, ctx: &mut CallContext, name: &str, args: Value) -> Observation {
        if ctx.toolbox().is_none() {
            ctx.set_toolbox(self.clone());
        }
        match self.get(name) {
            Some(spec) => invoke(spec, ctx, args, self.default_timeout).await,
            None => Observation::error(
                ToolErrorKind::UnknownTool,
                format!(
                    "Error: there is no tool named `{name}`. Available tools: {}.",
                    self.names().join(", ")
                ),
            ),
        }
    }

    /// [`call_json`](Self::call_json) on a runtime of its own, for code outside tokio (a
    /// CLI, a test). Do not call it from inside a tokio runtime.
    pub fn call_json_blocking(&self, name: &str, args_json: &str) -> Observation {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => {
                let observation = runtime.block_on(self.call_json(name, args_json));
                // A sync tool abandoned at its timeout may still be running: don't wait.
                runtime.shutdown_background();
                observation
            }
            Err(e) => Observation::error(
                ToolErrorKind::ToolError,
                format!("could not start a runtime for the call: {e}"),
            ),
        }
    }
}

impl CallContext {
    /// The chain's toolbox: what a tool calling other tools may call (see
    /// [`bridge`](CallContext::bridge)).
    pub fn toolbox(&self) -> Option<&Toolbox> {
        self.extension::<Toolbox>()
    }

    /// Sets the chain's toolbox.
    pub fn set_toolbox(&mut self, toolbox: Toolbox) {
        self.insert_extension(toolbox);
    }
}
