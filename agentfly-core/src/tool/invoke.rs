//! One guarded call: timeout, panic catching, naming the tool in errors, truncation.

use super::observation::truncate_chars;
use super::{CallContext, Observation, ToolErrorKind, ToolFailure, ToolSpec};
use futures_util::FutureExt;
use serde_json::Value;
use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

/// Runs `spec` with `args` in `ctx`, never longer than its timeout (or `default_timeout`),
/// turning every failure into an error observation that names the tool.
pub(crate) async fn invoke(
    spec: &ToolSpec,
    ctx: &mut CallContext,
    args: Value,
    default_timeout: Duration,
) -> Observation {
    let timeout = spec
        .options
        .timeout_ms
        .map_or(default_timeout, Duration::from_millis);
    ctx.begin_call();
    let guarded = AssertUnwindSafe(spec.call(ctx, args)).catch_unwind();
    let outcome = match tokio::time::timeout(timeout, guarded).await {
        Err(_elapsed) => Err(ToolFailure::new(
            ToolErrorKind::TimedOut,
            format!(
                "timed out after {} ms and was cancelled",
                timeout.as_millis()
            ),
        )),
        Ok(Err(panic)) => Err(panicked(panic.as_ref())),
        Ok(Ok(result)) => result,
    };
    if let Err(failure) = &outcome
        && matches!(
            failure.kind,
            ToolErrorKind::TimedOut | ToolErrorKind::Panicked
        )
    {
        ctx.discard_touched();
    }
    // Only what the tool itself wrote is cut; the framework's own messages stay whole.
    let max = spec.options.max_output_chars.unwrap_or(usize::MAX);
    let mut observation = match outcome {
        Ok(mut observation) => {
            observation.truncate(max);
            observation
        }
        Err(mut failure) => {
            let cut = failure.kind == ToolErrorKind::ToolError
                && truncate_chars(&mut failure.message, max);
            let mut observation = failed(spec.name, failure);
            observation.truncated = cut;
            observation
        }
    };
    // A terminal tool's success ends the chain; so does any tool that says so itself (a
    // text world whose episode is over).
    observation.terminal = (spec.options.terminal || observation.terminal) && !observation.is_error;
    observation
}

/// The error observation of a failed call of `tool`.
pub(crate) fn failed(tool: &str, failure: ToolFailure) -> Observation {
    let text = match failure.kind {
        ToolErrorKind::ToolError => format!("Error from tool `{tool}`: {}", failure.message),
        kind => format!("Error calling tool `{tool}` ({kind}): {}", failure.message),
    };
    Observation::error(failure.kind, text)
}

/// The failure of a call that panicked with `payload`.
pub(crate) fn panicked(payload: &(dyn Any + Send)) -> ToolFailure {
    ToolFailure::new(
        ToolErrorKind::Panicked,
        format!("the tool panicked: {}", panic_message(payload)),
    )
}

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_string())
}
