//! `POST /v1/chat/completions`: the request as OpenAI clients send it, read with errors that
//! name the field, and checked. Fields the endpoint does not use (`user`, `metadata`,
//! `parallel_tool_calls`, penalties...) are accepted and ignored, as OpenAI-compatible
//! servers do.

use crate::ApiError;
use serde::Deserialize;
use serde_json::Value;

/// A chat completion request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatRequest {
    /// The model's name (any; the endpoint serves one policy).
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The functions the model may call (OpenAI function schemas).
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    /// `"none"` turns tool calls off; `"auto"`, `"required"` or a named function are
    /// accepted and behave as `"auto"` (nothing forces the model's choice).
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Sampling temperature, 0 to 2 (default 1; 0 is greedy).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Nucleus mass, in (0, 1] (default 1).
    #[serde(default)]
    pub top_p: Option<f32>,
    /// Top-k (an extension; 0 = off).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// The most tokens to generate.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// The same, by its newer name.
    #[serde(default)]
    pub max_completion_tokens: Option<usize>,
    /// Seed of the sampling.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Stop strings: one or a list.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Choices to generate.
    #[serde(default)]
    pub n: Option<usize>,
    /// Answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `{"include_usage": true}`: a last chunk with the usage.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Return each sampled token's log-probability.
    #[serde(default)]
    pub logprobs: Option<bool>,
}

/// `stop`: a string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// One message.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Text, a list of text parts, or null.
    #[serde(default)]
    pub content: Option<Value>,
    /// An assistant's calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallMessage>>,
    /// Which call a tool message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// A name (kept for tool messages that give one).
    #[serde(default)]
    pub name: Option<String>,
}

/// One call of an assistant message.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ToolCallMessage {
    /// The call's id.
    #[serde(default)]
    pub id: String,
    /// The function called.
    pub function: FunctionCall,
}

/// The function of a call.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FunctionCall {
    /// Its name.
    pub name: String,
    /// Its arguments, a JSON string.
    #[serde(default)]
    pub arguments: String,
}

/// The limits a request is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most choices.
    pub max_n: usize,
}

impl ChatRequest {
    /// Reads a request body; a wrong field's error names it.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                ApiError::BadRequest {
                    message: format!("the request body is not valid JSON: {inner}"),
                    param: None,
                    code: None,
                }
            } else {
                ApiError::bad(&path, format!("`{path}`: {inner}"))
            }
        })
    }

    /// Checks the values; the first wrong one is the error.
    pub fn check(&self, limits: Limits) -> Result<(), ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad(
                "messages",
                "`messages` must hold at least one message",
            ));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ApiError::bad(
                "temperature",
                format!("`temperature` must be in [0, 2], not {t}"),
            ));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(ApiError::bad(
                "top_p",
                format!("`top_p` must be in (0, 1], not {p}"),
            ));
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > limits.max_n {
            return Err(ApiError::bad(
                "n",
                format!("`n` must be 1 to {}, not {n}", limits.max_n),
            ));
        }
        let stops = self.stop_strings();
        if stops.len() > 4 || stops.iter().any(|s| s.is_empty() || s.len() > 256) {
            return Err(ApiError::bad(
                "stop",
                "`stop` takes at most 4 strings, each of 1 to 256 bytes",
            ));
        }
        if self.max_tokens() == Some(0) {
            return Err(ApiError::bad(
                "max_tokens",
                "`max_tokens` must be at least 1",
            ));
        }
        if let Some(tools) = &self.tools {
            for (i, tool) in tools.iter().enumerate() {
                if tool["function"]["name"].as_str().is_none() {
                    return Err(ApiError::bad(
                        format!("tools[{i}].function.name"),
                        format!(
                            "`tools[{i}]` must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \"parameters\": {{...}}}}}}"
                        ),
                    ));
                }
            }
        }
        for (i, m) in self.messages.iter().enumerate() {
            match m.role.as_str() {
                "system" | "developer" | "user" | "assistant" => {}
                "tool" if m.tool_call_id.is_some() || m.name.is_some() => {}
                "tool" => {
                    return Err(ApiError::bad(
                        format!("messages[{i}].tool_call_id"),
                        format!(
                            "`messages[{i}]`: a tool message needs the `tool_call_id` of the call it answers"
                        ),
                    ));
                }
                other => {
                    return Err(ApiError::bad(
                        format!("messages[{i}].role"),
                        format!(
                            "`messages[{i}].role` is {other:?}: system, developer, user, assistant or tool"
                        ),
                    ));
                }
            }
            text_of(m.content.as_ref()).map_err(|e| {
                ApiError::bad(
                    format!("messages[{i}].content"),
                    format!("`messages[{i}].content`: {e}"),
                )
            })?;
            for (j, call) in m.tool_calls.iter().flatten().enumerate() {
                if !call.function.arguments.trim().is_empty()
                    && serde_json::from_str::<Value>(&call.function.arguments).is_err()
                {
                    return Err(ApiError::bad(
                        format!("messages[{i}].tool_calls[{j}].function.arguments"),
                        format!(
                            "`messages[{i}].tool_calls[{j}].function.arguments` is not a JSON string of the arguments"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `max_completion_tokens`, else `max_tokens`.
    pub fn max_tokens(&self) -> Option<usize> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// The stop strings.
    pub fn stop_strings(&self) -> Vec<String> {
        match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        }
    }

    /// Are tool calls read from the reply? (Tools given, and `tool_choice` not `"none"`.)
    pub fn tools_on(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty())
            && self.tool_choice.as_ref().and_then(Value::as_str) != Some("none")
    }
}

/// A message's text: a string, null, or text parts joined.
pub fn text_of(content: Option<&Value>) -> Result<String, String> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(format!(
                            "content parts of type {} are not supported (text only)",
                            kind.unwrap_or("?")
                        ));
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(format!(
            "must be a string or a list of text parts, not {other}"
        )),
    }
}
