//! What `#[tool]` registers.

use super::{CallContext, Observation, ToolFailure};
use crate::origin::Origin;
use serde_json::{Value, json};
use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// The future of one invocation: the observation, or a failure the toolbox reports.
pub type ToolFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Observation, ToolFailure>> + Send + 'a>>;

/// A registered tool. `#[tool]` builds one per function; binaries find them through
/// [`Toolbox`](super::Toolbox).
#[derive(Debug)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: &'static str,
    /// The doc comment of the function.
    pub description: &'static str,
    /// The JSON Schema of the arguments (an object, sub-schemas inlined).
    pub parameters: fn() -> Value,
    /// Deserializes the arguments and runs the function. Use [`Toolbox`](super::Toolbox)
    /// to call it: it adds the timeout, panic catching and truncation.
    pub invoke: for<'a> fn(&'a mut CallContext, Value) -> ToolFuture<'a>,
    /// The options given in `#[tool(...)]`.
    pub options: ToolOptions,
    /// Where the function is defined.
    pub origin: Origin,
    /// A tool found at run time (an MCP server's): its schema and invocation, which
    /// `parameters` and `invoke` then stand in for. `None` for `#[tool]` functions.
    pub dynamic: Option<&'static dyn DynamicTool>,
}

/// A tool found at run time rather than compiled in (an MCP server's tools): what
/// [`ToolSpec::dynamic`] builds a spec from.
pub trait DynamicTool: Send + Sync + fmt::Debug {
    /// The JSON Schema of the arguments (an object).
    fn parameters(&self) -> Value;
    /// Runs the tool with the arguments, in the calling chain's context.
    fn invoke<'a>(&'a self, ctx: &'a mut CallContext, args: Value) -> ToolFuture<'a>;
}

/// The `parameters` of a dynamic spec (never called: [`ToolSpec::parameters_schema`]
/// asks the tool).
fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The `invoke` of a dynamic spec (never called: [`ToolSpec::call`] asks the tool).
fn no_invoke<'a>(_: &'a mut CallContext, _: Value) -> ToolFuture<'a> {
    Box::pin(async {
        Err(ToolFailure::new(
            super::ToolErrorKind::ToolError,
            "a dynamic tool was invoked through its placeholder",
        ))
    })
}

/// The options of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolOptions {
    /// Longer output is cut, with a visible marker.
    pub max_output_chars: Option<usize>,
    /// A successful call ends the chain (e.g. submitting the final answer).
    pub terminal: bool,
    /// The tool's own timeout; else the toolbox's default.
    pub timeout_ms: Option<u64>,
    /// The environment type of a stateful tool, as written in `env = Type`.
    pub env: Option<&'static str>,
}

impl ToolSpec {
    /// A spec for a tool found at run time. It lives as long as the process, as registered
    /// tools do (the spec and the tool are leaked: a process finds each server's tools
    /// once).
    pub fn dynamic(
        name: String,
        description: String,
        options: ToolOptions,
        origin: Origin,
        tool: Box<dyn DynamicTool>,
    ) -> &'static ToolSpec {
        Box::leak(Box::new(ToolSpec {
            name: Box::leak(name.into_boxed_str()),
            description: Box::leak(description.into_boxed_str()),
            parameters: no_parameters,
            invoke: no_invoke,
            options,
            origin,
            dynamic: Some(Box::leak(tool)),
        }))
    }

    /// The JSON Schema of the arguments.
    pub fn parameters_schema(&self) -> Value {
        match self.dynamic {
            Some(tool) => tool.parameters(),
            None => (self.parameters)(),
        }
    }

    /// Runs the tool unguarded (no timeout, no panic catching: use
    /// [`Toolbox`](super::Toolbox)).
    pub fn call<'a>(&'a self, ctx: &'a mut CallContext, args: Value) -> ToolFuture<'a> {
        match self.dynamic {
            Some(tool) => tool.invoke(ctx, args),
            None => (self.invoke)(ctx, args),
        }
    }

    /// The schema in the OpenAI function-calling shape:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    pub fn schema(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_schema(),
            }
        })
    }
}

inventory::collect!(ToolSpec);
