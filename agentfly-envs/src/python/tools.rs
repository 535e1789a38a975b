//! The chain's tools inside the sandbox: each is a Python function there, whose calls come
//! back over the kernel's channel to run in Rust ([`ToolBridge`]) — one `#[tool]` serves
//! JSON calls and code alike, with no Python copy of it.
//!
//! The channel trusts nothing the code sends: only the bridge's tools can be reached, with
//! its limits on count and size; every message is bounded in length; the cell's wall-clock
//! limit counts the Python side's time (a tool's time is bounded by its own timeout).

use super::supervisor::KernelError;
use super::{CellOutput, PythonSandbox};
use agentfly_core::tool::{ToolBridge, ToolSpec};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

impl PythonSandbox {
    /// Runs `code` as one notebook cell with the `bridge`'s tools defined as functions.
    /// Never fails: a timeout or a crash is reported in the output and the interpreter
    /// restarted for the next call.
    pub async fn run_with_tools(
        &mut self,
        code: &str,
        mut bridge: Option<&mut ToolBridge<'_>>,
    ) -> CellOutput {
        self.calls += 1;
        let start = Instant::now();
        if self.supervisor.is_none()
            && let Err(e) = self.restart().await
        {
            return CellOutput {
                error: Some(e.to_string()),
                ..CellOutput::default()
            };
        }
        let tools: Vec<Value> = bridge
            .as_ref()
            .map(|b| b.tools().iter().map(|t| describe(t)).collect())
            .unwrap_or_default();
        let request = json!({
            "op": "exec",
            "code": code,
            "tools": tools,
            // The kernel refuses calls past the bridge's limit without sending them.
            "max_calls": bridge.as_ref().map(|b| b.limits().max_calls),
        });
        let mut out = match self.exec(&request, &mut bridge).await {
            Ok(v) => {
                let refused = v["refused_calls"].as_u64().unwrap_or(0);
                if let Some(bridge) = bridge.as_mut() {
                    bridge.count_refused(usize::try_from(refused).unwrap_or(usize::MAX));
                }
                self.parse_cell(v)
            }
            Err(why) => self.lost_call(why).await,
        };
        out.wall_seconds = start.elapsed().as_secs_f64();
        out
    }

    /// Sends the cell and answers its tool calls until its result comes.
    async fn exec(
        &mut self,
        request: &Value,
        bridge: &mut Option<&mut ToolBridge<'_>>,
    ) -> Result<Value, KernelError> {
        let limit = self.config.call_timeout;
        let mut python_time = Duration::ZERO;
        self.send(request).await?;
        loop {
            let left = limit.saturating_sub(python_time);
            if left.is_zero() {
                return Err(KernelError::NoAnswer(limit));
            }
            let waited = Instant::now();
            let message = self.read_line(left).await.map_err(|e| match e {
                KernelError::NoAnswer(_) => KernelError::NoAnswer(limit),
                other => other,
            })?;
            python_time += waited.elapsed();
            if message.get("op").and_then(Value::as_str) != Some("call") {
                self.supervisor()?.busy = false;
                return Ok(message);
            }
            let name = message.get("tool").and_then(Value::as_str).unwrap_or("");
            let args = message.get("args").cloned().unwrap_or(Value::Null);
            let answer = match bridge.as_deref_mut() {
                Some(bridge) => {
                    let observation = bridge.call(name, args).await;
                    json!({"text": observation.text, "is_error": observation.is_error})
                }
                None => json!({
                    "text": "Error: no tools can be called from this code",
                    "is_error": true,
                }),
            };
            self.write_message(&answer, "answering a tool call").await?;
        }
    }
}

/// What the kernel needs to define a tool as a function.
fn describe(tool: &ToolSpec) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters_schema(),
    })
}

fn python_type(schema: &Value) -> String {
    let one = |kind: &str| {
        match kind {
            "string" => "str",
            "integer" => "int",
            "number" => "float",
            "boolean" => "bool",
            "array" => "list",
            "object" => "dict",
            "null" => "None",
            _ => "object",
        }
        .to_string()
    };
    match schema.get("type") {
        Some(Value::String(kind)) => one(kind),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(one)
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "object".to_string(),
    }
}

/// The tools as the code sees them, for a system prompt: one Python signature and
/// docstring per tool (`def search(query: str, k: int | None = None) -> str:`).
pub fn python_stubs(tools: &[&ToolSpec]) -> String {
    let mut out = String::new();
    for tool in tools {
        let schema = tool.parameters_schema();
        let empty = serde_json::Map::new();
        let props = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut params: Vec<String> = props
            .iter()
            .filter(|(name, _)| required.contains(&name.as_str()))
            .map(|(name, sub)| format!("{name}: {}", python_type(sub)))
            .collect();
        params.extend(
            props
                .iter()
                .filter(|(name, _)| !required.contains(&name.as_str()))
                .map(|(name, sub)| format!("{name}: {} = None", python_type(sub))),
        );
        out.push_str(&format!(
            "def {}({}) -> str:\n    \"\"\"{}\"\"\"\n",
            tool.name,
            params.join(", "),
            tool.description.trim()
        ));
    }
    out
}
