//! What the code emitted by `#[tool]` and `#[reward]` calls. Not a public API: names here
//! change without notice.

pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;

pub use crate::data::Sample;
pub use crate::origin::Origin;
pub use crate::reward::{RewardFuture, RewardInput, RewardSpec};
pub use crate::tool::{
    CallContext, Observation, ToolFailure, ToolFuture, ToolOptions, ToolSpec, parameters_schema,
};

use crate::reward::{IntoRewardOutput, RewardError, RewardOutput};
use crate::tool::{ToolErrorKind, panicked};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt::Display;

/// An environment detached from its context for an async tool that also holds the context
/// (`&mut CallContext`). Put back with [`restore`](Self::restore); one dropped instead (the
/// call panicked or was cancelled at its timeout) is marked broken, so its pool replaces it.
pub struct DetachedEnv<T: 'static> {
    handle: Option<crate::tool::EnvHandle<T>>,
}

impl<T: 'static> DetachedEnv<T> {
    /// Holds `handle`.
    pub fn new(handle: crate::tool::EnvHandle<T>) -> Self {
        Self {
            handle: Some(handle),
        }
    }

    /// The instance.
    pub fn get_mut(&mut self) -> &mut T {
        self.handle.as_mut().expect("held until restored").get_mut()
    }

    /// The handle, to put back into the context.
    pub fn restore(mut self) -> crate::tool::EnvHandle<T> {
        self.handle.take().expect("held until restored")
    }
}

impl<T: 'static> Drop for DetachedEnv<T> {
    fn drop(&mut self) {
        if let Some(handle) = &mut self.handle {
            handle.mark_broken();
        }
    }
}

/// Compile-time check with a readable message for a parameter type that cannot be one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a #[tool] parameter: it must implement both \
               `serde::Deserialize` and `schemars::JsonSchema`",
    label = "this parameter type",
    note = "derive both on your type: #[derive(serde::Deserialize, schemars::JsonSchema)]"
)]
pub trait ToolParameter {}
impl<T: DeserializeOwned + schemars::JsonSchema> ToolParameter for T {}

/// Asserts `T: ToolParameter`.
pub fn assert_tool_parameter<T: ToolParameter>() {}

/// Deserializes a tool's arguments. `null` counts as `{}`; a string holding a JSON object
/// (double-encoded arguments, a common model slip) is decoded once more.
pub fn decode_arguments<T: DeserializeOwned>(args: Value) -> Result<T, ToolFailure> {
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(inner @ Value::Object(_)) => inner,
            _ => Value::String(text),
        },
        other => other,
    };
    if !args.is_object() {
        return Err(ToolFailure::new(
            ToolErrorKind::InvalidArguments,
            format!(
                "the arguments must be a JSON object of named arguments, not {}",
                json_kind(&args)
            ),
        ));
    }
    serde_path_to_error::deserialize::<_, T>(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde already names an unknown field; the path would only repeat it.
        let message = if path == "." || inner.to_string().starts_with("unknown field") {
            inner.to_string()
        } else {
            format!("argument `{path}`: {inner}")
        };
        ToolFailure::new(ToolErrorKind::InvalidArguments, message)
    })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Runs a synchronous tool on tokio's blocking pool; a panic becomes a failure.
pub async fn run_blocking<F, R>(f: F) -> Result<R, ToolFailure>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        if e.is_panic() {
            panicked(e.into_panic().as_ref())
        } else {
            ToolFailure::new(ToolErrorKind::TimedOut, "the call was cancelled")
        }
    })
}

/// What a `#[tool]` may return (besides a `Result` of it): anything `Into<Observation>`.
#[diagnostic::on_unimplemented(
    message = "a #[tool] returns `String`, a number, anything `Into<Observation>`, or a \
               `Result<T, E: Display>` of one; not `{Self}`",
    label = "this return value",
    note = "format it into a `String`, or `impl From<{Self}> for Observation`"
)]
pub trait ToolOutput {
    /// The conversion.
    fn into_observation(self) -> Observation;
}

impl<T: Into<Observation>> ToolOutput for T {
    fn into_observation(self) -> Observation {
        self.into()
    }
}

/// A tool's plain return value as an observation.
pub fn into_observation<T: ToolOutput>(value: T) -> Observation {
    value.into_observation()
}

/// A tool's `Result` as an observation: `Err` is flagged as an error.
pub fn result_into_observation<T: ToolOutput, E: Display>(
    result: Result<T, E>,
) -> Result<Observation, ToolFailure> {
    result
        .map(ToolOutput::into_observation)
        .map_err(|e| ToolFailure::new(ToolErrorKind::ToolError, e.to_string()))
}

/// A required sample field for a reward parameter.
pub fn sample_field<T: DeserializeOwned>(
    sample: &Sample,
    reward: &str,
    field: &str,
) -> Result<T, RewardError> {
    match sample.field(field) {
        Some(value) => parse_field(sample, reward, field, value),
        None => Err(RewardError::MissingField {
            reward: reward.to_string(),
            field: field.to_string(),
            sample_id: sample.id.clone(),
            available: sample.field_names(),
        }),
    }
}

/// An optional sample field (`Option<T>` parameter): absent or `null` is `None`.
pub fn sample_field_opt<T: DeserializeOwned>(
    sample: &Sample,
    reward: &str,
    field: &str,
) -> Result<Option<T>, RewardError> {
    match sample.field(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => parse_field(sample, reward, field, value),
    }
}

fn parse_field<T: DeserializeOwned>(
    sample: &Sample,
    reward: &str,
    field: &str,
    value: &Value,
) -> Result<T, RewardError> {
    T::deserialize(value).map_err(|e| RewardError::InvalidField {
        reward: reward.to_string(),
        field: field.to_string(),
        sample_id: sample.id.clone(),
        message: e.to_string(),
    })
}

/// A reward's plain return value.
pub fn into_reward_output<T: IntoRewardOutput>(value: T) -> RewardOutput {
    value.into_reward_output()
}

/// A reward's `Result`: `Err` becomes [`RewardError::Failed`].
pub fn result_into_reward_output<T: IntoRewardOutput, E: Display>(
    reward: &str,
    result: Result<T, E>,
) -> Result<RewardOutput, RewardError> {
    result
        .map(IntoRewardOutput::into_reward_output)
        .map_err(|e| RewardError::Failed {
            reward: reward.to_string(),
            message: e.to_string(),
        })
}
