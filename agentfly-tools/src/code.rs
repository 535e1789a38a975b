//! The `code_interpreter` tool: Python in the chain's [`PythonSandbox`], like a notebook.

use agentfly_core::{Observation, ToolErrorKind, tool};
use agentfly_envs::PythonSandbox;

/// Runs Python code in a persistent sandboxed interpreter, like a notebook cell: variables,
/// imports and files persist between calls. Shows what the code prints, the value of its
/// last expression, and any exception with its traceback. A `notepad` object (todo list,
/// facts, draft) is predefined.
#[tool(env = PythonSandbox, timeout_ms = 120000)]
pub async fn code_interpreter(
    sandbox: &mut PythonSandbox,
    /// The Python code to run.
    code: String,
) -> Observation {
    let out = sandbox.run(&code).await;
    let text = out.render();
    let mut observation = if out.is_error() {
        Observation::error(ToolErrorKind::ToolError, text)
    } else {
        Observation::text(text)
    };
    observation.truncated = out.truncated;
    observation
}
