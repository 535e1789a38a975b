//! Tools called from inside another tool — code-as-action's functions: inside the chain's
//! Python sandbox every tool of the chain's toolbox is a function, and its calls come back
//! here, bounded, to run like any call of the chain.

use super::{CallContext, Observation, ToolErrorKind, ToolSpec, Toolbox};
use serde_json::Value;
use std::time::Instant;

/// The bounds on the calls one tool call makes into the chain's toolbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BridgeLimits {
    /// Calls one tool call (one code cell) may make; later ones are refused.
    pub max_calls: usize,
    /// Largest arguments of one call, as JSON text.
    pub max_argument_bytes: usize,
}

impl Default for BridgeLimits {
    fn default() -> Self {
        Self {
            max_calls: 16,
            max_argument_bytes: 16 << 10,
        }
    }
}

/// A call made from inside another tool, as the chain records it.
#[derive(Debug, Clone, PartialEq)]
pub struct NestedCall {
    /// The tool whose call made this one (`code_interpreter`).
    pub via: &'static str,
    /// The tool called, as named.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
    /// What came back.
    pub observation: Observation,
    /// Seconds it took.
    pub seconds: f64,
    /// Later calls refused past the call limit, counted here and not recorded one by one
    /// (code looping on a refused call would otherwise make a record per refusal).
    pub repeats: usize,
}

/// The chain's tools as one tool call sees them: every tool of the chain's toolbox but the
/// caller and the tools sharing its environment (they would need a second instance of it),
/// each call made in the chain's context with the tool's own timeout, counted, bounded
/// and recorded for the trajectory.
pub struct ToolBridge<'a> {
    ctx: &'a mut CallContext,
    caller: &'static str,
    toolbox: Toolbox,
    limits: BridgeLimits,
    made: usize,
    /// Where the first call refused past the limit is recorded, in the context's calls.
    first_refusal: Option<usize>,
}

impl std::fmt::Debug for ToolBridge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolBridge")
            .field("caller", &self.caller)
            .field("tools", &self.toolbox.names())
            .field("made", &self.made)
            .finish()
    }
}

/// The calls made from inside tools since they were last taken.
#[derive(Default)]
struct NestedCalls(Vec<NestedCall>);

impl CallContext {
    /// The calls made from inside other tools since the last time they were taken.
    pub fn take_nested_calls(&mut self) -> Vec<NestedCall> {
        std::mem::take(&mut self.extension_mut::<NestedCalls>().0)
    }

    /// The tools `caller` may call from inside its own call, bounded by `limits`.
    pub fn bridge(&mut self, caller: &'static str, limits: BridgeLimits) -> ToolBridge<'_> {
        let all = self
            .toolbox()
            .cloned()
            .unwrap_or_else(|| Toolbox::from_specs(Vec::new()));
        let caller_env = all.get(caller).and_then(|s| s.options.env);
        let tools: Vec<&'static ToolSpec> = all
            .tools()
            .iter()
            .copied()
            .filter(|t| t.name != caller && (caller_env.is_none() || t.options.env != caller_env))
            .collect();
        ToolBridge {
            toolbox: all.with_only(tools),
            ctx: self,
            caller,
            limits,
            made: 0,
            first_refusal: None,
        }
    }
}

impl ToolBridge<'_> {
    /// The tools that may be called.
    pub fn tools(&self) -> &[&'static ToolSpec] {
        self.toolbox.tools()
    }

    /// Calls made so far (refused ones included).
    pub fn calls_made(&self) -> usize {
        self.made
    }

    /// The bounds it enforces.
    pub fn limits(&self) -> BridgeLimits {
        self.limits
    }

    /// Calls `name` with `args`: refused (an error observation) past the call limit, with
    /// arguments over the size limit, or for a tool this bridge does not offer; else run as
    /// the chain runs a call. Every call up to the limit is recorded for the trajectory,
    /// and the first past it; later ones are only counted (in that record's `repeats`).
    /// Arguments over the size limit are recorded as their size, not their text.
    pub async fn call(&mut self, name: &str, mut args: Value) -> Observation {
        let start = Instant::now();
        self.made += 1;
        if self.made > self.limits.max_calls {
            let observation = refused(format!(
                "Error: too many tool calls from one `{}` call (the limit is {})",
                self.caller, self.limits.max_calls
            ));
            let calls = &mut self.ctx.extension_mut::<NestedCalls>().0;
            if let Some(first) = self.first_refusal.and_then(|i| calls.get_mut(i)) {
                first.repeats += 1;
                return observation;
            }
            self.first_refusal = Some(calls.len());
            self.push(name, args, observation.clone(), start);
            return observation;
        }
        let size = args.to_string().len();
        let observation = if size > self.limits.max_argument_bytes {
            args = Value::String(format!("<{size} bytes of arguments, over the limit>"));
            refused(format!(
                "Error: the arguments of `{name}` are {size} bytes; the limit is {}",
                self.limits.max_argument_bytes
            ))
        } else if self.toolbox.get(name).is_none() {
            Observation::error(
                ToolErrorKind::UnknownTool,
                format!(
                    "Error: there is no tool named `{name}` here. Available: {}.",
                    self.toolbox.names().join(", ")
                ),
            )
        } else {
            self.toolbox.call(self.ctx, name, args.clone()).await
        };
        self.push(name, args, observation.clone(), start);
        observation
    }

    /// Counts `n` calls refused past the limit by the caller's own side without being sent
    /// (the sandbox's kernel does so), on the record of the first refusal.
    pub fn count_refused(&mut self, n: usize) {
        self.made = self.made.saturating_add(n);
        let calls = &mut self.ctx.extension_mut::<NestedCalls>().0;
        if let Some(first) = self.first_refusal.and_then(|i| calls.get_mut(i)) {
            first.repeats = first.repeats.saturating_add(n);
        }
    }

    fn push(&mut self, name: &str, arguments: Value, observation: Observation, start: Instant) {
        self.ctx.extension_mut::<NestedCalls>().0.push(NestedCall {
            via: self.caller,
            name: name.to_string(),
            arguments,
            observation,
            seconds: start.elapsed().as_secs_f64(),
            repeats: 0,
        });
    }
}

fn refused(text: String) -> Observation {
    Observation::error(ToolErrorKind::Refused, text)
}
