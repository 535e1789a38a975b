//! What `#[tool]` registers.

use super::{CallContext, Observation, ToolFailure};
use crate::origin::Origin;
use serde_json::{Value, json};
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
    /// The schema in the OpenAI function-calling shape:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    pub fn schema(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": (self.parameters)(),
            }
        })
    }
}

inventory::collect!(ToolSpec);
