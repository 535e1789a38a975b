//! The `code_interpreter` tool: Python in the chain's [`PythonSandbox`], like a notebook,
//! with the chain's other tools callable from the code as functions.

use agentfly_core::{CallContext, Observation, ToolErrorKind, tool};
use agentfly_envs::PythonSandbox;

/// Runs Python code in a persistent sandboxed interpreter, like a notebook cell: variables,
/// imports and files persist between calls. Shows what the code prints, the value of its
/// last expression, and any exception with its traceback. A `notepad` object (todo list,
/// facts, draft) is predefined, and so is every other tool of the task, as a function
/// that returns the tool's text (e.g. `search("Marie Curie", k=3)`) and raises `ToolError`
/// when the call fails.
#[tool(env = PythonSandbox, timeout_ms = 120000)]
pub async fn code_interpreter(
    sandbox: &mut PythonSandbox,
    ctx: &mut CallContext,
    /// The Python code to run.
    code: String,
) -> Observation {
    let limits = sandbox.config().tool_calls;
    let mut bridge = ctx.bridge("code_interpreter", limits);
    let out = sandbox.run_with_tools(&code, Some(&mut bridge)).await;
    let text = out.render();
    let mut observation = if out.is_error() {
        Observation::error(ToolErrorKind::ToolError, text)
    } else {
        Observation::text(text)
    };
    observation.truncated = out.truncated;
    observation
}
