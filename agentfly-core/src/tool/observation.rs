//! What a tool call gives back to the model.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The result of one tool call, as the model will read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The text shown to the model.
    pub text: String,
    /// The call failed: bad arguments, an `Err` returned by the tool, a panic, a timeout.
    pub is_error: bool,
    /// Why it failed, when `is_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ToolErrorKind>,
    /// The chain ends here: a successful call of a terminal tool, or a tool that sets it
    /// (a text world whose episode is over).
    #[serde(default)]
    pub terminal: bool,
    /// The text was cut at the tool's `max_output_chars`.
    #[serde(default)]
    pub truncated: bool,
}

/// The kinds of failed call, so callers can tell "bad arguments" from "tool crashed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// No tool of that name is in the toolbox.
    UnknownTool,
    /// The arguments were not valid JSON.
    InvalidJson,
    /// Valid JSON, but not the arguments the tool takes.
    InvalidArguments,
    /// The tool returned `Err`.
    ToolError,
    /// The tool panicked.
    Panicked,
    /// The tool ran past its timeout and was cancelled.
    TimedOut,
    /// A stateful tool was called without an instance of its environment.
    MissingEnvironment,
    /// The environment's pool gave no instance in time, or one could not be created.
    EnvironmentUnavailable,
    /// Not allowed from where it was made: a call from inside another tool over its limits.
    Refused,
    /// The chain's environment instance crashed or stopped answering, so its state (a
    /// world's episode) is gone: the chain ends with [`ChainEnd::Error`](crate::rollout::ChainEnd).
    EnvironmentLost,
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            ToolErrorKind::UnknownTool => "unknown tool",
            ToolErrorKind::InvalidJson => "invalid JSON",
            ToolErrorKind::InvalidArguments => "invalid arguments",
            ToolErrorKind::ToolError => "tool error",
            ToolErrorKind::Panicked => "panicked",
            ToolErrorKind::TimedOut => "timed out",
            ToolErrorKind::MissingEnvironment => "missing environment",
            ToolErrorKind::EnvironmentUnavailable => "environment unavailable",
            ToolErrorKind::Refused => "refused",
            ToolErrorKind::EnvironmentLost => "environment lost",
        };
        f.write_str(text)
    }
}

/// A failure inside a tool's invocation, before the toolbox names the tool in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    /// What kind of failure.
    pub kind: ToolErrorKind,
    /// What went wrong, for the model to read.
    pub message: String,
}

impl ToolFailure {
    /// A failure of `kind` saying `message`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl Observation {
    /// A successful observation with `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            error_kind: None,
            terminal: false,
            truncated: false,
        }
    }

    /// An error observation of `kind` with `text`.
    pub fn error(kind: ToolErrorKind, text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            error_kind: Some(kind),
            terminal: false,
            truncated: false,
        }
    }

    /// Cuts the text to at most `max_chars` characters, followed by a visible marker.
    pub fn truncate(&mut self, max_chars: usize) {
        if truncate_chars(&mut self.text, max_chars) {
            self.truncated = true;
        }
    }
}

/// Cuts `text` to at most `max_chars` characters followed by a visible marker; says
/// whether it cut.
pub(crate) fn truncate_chars(text: &mut String, max_chars: usize) -> bool {
    let total = text.chars().count();
    if total <= max_chars {
        return false;
    }
    let cut = text
        .char_indices()
        .nth(max_chars)
        .map_or(text.len(), |(i, _)| i);
    text.truncate(cut);
    text.push_str(&format!(
        "\n[output truncated: showing {max_chars} of {total} characters]"
    ));
    true
}

impl From<String> for Observation {
    fn from(text: String) -> Self {
        Observation::text(text)
    }
}

impl From<&str> for Observation {
    fn from(text: &str) -> Self {
        Observation::text(text)
    }
}

impl From<&String> for Observation {
    fn from(text: &String) -> Self {
        Observation::text(text.clone())
    }
}

impl From<std::borrow::Cow<'_, str>> for Observation {
    fn from(text: std::borrow::Cow<'_, str>) -> Self {
        Observation::text(text.into_owned())
    }
}

/// A JSON value is shown as compact JSON (a string value as its plain text).
impl From<serde_json::Value> for Observation {
    fn from(value: serde_json::Value) -> Self {
        match value {
            serde_json::Value::String(s) => Observation::text(s),
            other => Observation::text(other.to_string()),
        }
    }
}

/// `()` is shown as `done`, so the model sees that the call went through.
impl From<()> for Observation {
    fn from((): ()) -> Self {
        Observation::text("done")
    }
}

macro_rules! display_into_observation {
    ($($t:ty),*) => {$(
        impl From<$t> for Observation {
            fn from(value: $t) -> Self {
                Observation::text(value.to_string())
            }
        }
    )*};
}
display_into_observation!(
    bool, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64
);
