//! How a model writes tool calls, and how they are read back out of its text.
//!
//! | format | the model writes | stops |
//! |---|---|---|
//! | [`Hermes`] | `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per turn (Qwen, Hermes, SmolLM2's template) | end of turn |
//! | [`ReAct`] | `Action: tool` / `Action Input: {...}`; `Final Answer: ...` ends | `Observation:` |
//! | [`CodeAction`] | a fenced Python block, run by `code_interpreter` (L0, AgentFly's CodeAgent) | end of turn |
//!
//! Parsing is lenient with sloppy models (see [`parse_lenient`]: single quotes, trailing
//! commas, Python literals, a missing closing tag at a stop) and precise in what it
//! reports: a call that cannot be read is a [`CallParse::Malformed`] with the reason, which
//! the chain turns into an error observation the model sees, and counts.

mod lenient;

pub use lenient::parse_lenient;

use serde_json::{Map, Value};

/// One tool call read from the model's text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name as the model wrote it.
    pub name: String,
    /// Its arguments (a JSON object when the model wrote one).
    pub arguments: Value,
}

/// A call as read: well-formed, or not, with why.
#[derive(Debug, Clone, PartialEq)]
pub enum CallParse {
    /// A readable call.
    Call(ToolCall),
    /// Something that was meant as a call but cannot be read.
    Malformed {
        /// The text of the attempt.
        text: String,
        /// What is wrong, for the model to read.
        error: String,
    },
}

/// What a turn's text holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParsedTurn {
    /// The calls, in order.
    pub calls: Vec<CallParse>,
    /// A final answer the format marks explicitly (ReAct's `Final Answer:`).
    pub final_answer: Option<String>,
}

/// A way of writing tool calls.
pub trait ToolCallFormat: Send + Sync {
    /// Its name (`hermes`, `react`, `code`).
    fn name(&self) -> &'static str;
    /// Reads the calls out of one turn of model text.
    fn parse(&self, text: &str) -> ParsedTurn;
    /// Strings that end a turn in this format, besides the model's end-of-turn token.
    fn stop_strings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The format called `name`.
pub fn format_by_name(name: &str) -> Option<Box<dyn ToolCallFormat>> {
    match name {
        "hermes" => Some(Box::new(Hermes)),
        "react" => Some(Box::new(ReAct)),
        "code" => Some(Box::new(CodeAction::default())),
        _ => None,
    }
}

/// Reads `{"name": ..., "arguments": ...}` (also `parameters` / `args`, arguments given as
/// a JSON string, or the call as `{"tool": ...}`).
fn read_call_object(text: &str) -> CallParse {
    let malformed = |error: String| CallParse::Malformed {
        text: text.to_string(),
        error,
    };
    let value = match parse_lenient(text) {
        Ok(value) => value,
        Err(e) => return malformed(format!("the tool call is not valid JSON: {e}")),
    };
    let Value::Object(mut object) = value else {
        return malformed(
            "the tool call must be a JSON object {\"name\": ..., \"arguments\": {...}}".into(),
        );
    };
    let name = ["name", "tool", "function"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str).map(str::to_string));
    let Some(name) = name else {
        return malformed("the tool call has no \"name\"".into());
    };
    let arguments = ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|k| object.remove(*k))
        .unwrap_or(Value::Object(Map::new()));
    let arguments = match arguments {
        Value::String(s) => parse_lenient(&s).unwrap_or(Value::String(s)),
        other => other,
    };
    CallParse::Call(ToolCall { name, arguments })
}

/// Hermes / Qwen: `<tool_call>{json}</tool_call>`, any number per turn. A last call whose
/// closing tag is missing (generation stopped) is read to the end of the text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hermes;

impl Hermes {
    const OPEN: &'static str = "<tool_call>";
    const CLOSE: &'static str = "</tool_call>";
}

impl ToolCallFormat for Hermes {
    fn name(&self) -> &'static str {
        "hermes"
    }

    fn parse(&self, text: &str) -> ParsedTurn {
        let mut calls = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find(Self::OPEN) {
            let body_start = start + Self::OPEN.len();
            let (body, next) = match rest[body_start..].find(Self::CLOSE) {
                Some(end) => (
                    &rest[body_start..body_start + end],
                    body_start + end + Self::CLOSE.len(),
                ),
                None => (&rest[body_start..], rest.len()),
            };
            // A cut-off turn may end with the end-of-turn marker inside the open call.
            let body = body.trim().trim_end_matches("<|im_end|>").trim();
            calls.push(read_call_object(body));
            rest = &rest[next..];
        }
        ParsedTurn {
            calls,
            final_answer: None,
        }
    }
}

/// ReAct: `Thought: ...` / `Action: tool` / `Action Input: {...}`, stopped before the
/// model invents its own `Observation:`; `Final Answer: ...` ends the task.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReAct;

impl ToolCallFormat for ReAct {
    fn name(&self) -> &'static str {
        "react"
    }

    fn parse(&self, text: &str) -> ParsedTurn {
        let text = match text.find("\nObservation:") {
            Some(i) => &text[..i],
            None => text,
        };
        let mut turn = ParsedTurn::default();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if let Some(answer) = line.strip_prefix("Final Answer:") {
                let mut answer = answer.trim().to_string();
                for more in lines.by_ref() {
                    answer.push('\n');
                    answer.push_str(more);
                }
                turn.final_answer = Some(answer.trim().to_string());
                break;
            }
            let Some(name) = line.strip_prefix("Action:") else {
                continue;
            };
            let name = name.trim().trim_matches('`').to_string();
            // The input runs from `Action Input:` to the next `Action:` / `Thought:` line.
            let mut input = None;
            while let Some(next) = lines.peek() {
                let next = next.trim();
                if next.starts_with("Action:") || next.starts_with("Thought:") {
                    break;
                }
                let next = lines.next().expect("peeked").trim();
                if let Some(first) = next.strip_prefix("Action Input:") {
                    input = Some(first.trim().to_string());
                } else if let Some(input) = &mut input {
                    input.push('\n');
                    input.push_str(next);
                }
            }
            let call = match input {
                _ if name.is_empty() => CallParse::Malformed {
                    text: line.to_string(),
                    error: "`Action:` names no tool".into(),
                },
                None => CallParse::Malformed {
                    text: line.to_string(),
                    error: format!("`Action: {name}` has no `Action Input:` line"),
                },
                Some(input) => {
                    let arguments = match parse_lenient(&input) {
                        Ok(value @ Value::Object(_)) => value,
                        _ => Value::String(input),
                    };
                    CallParse::Call(ToolCall { name, arguments })
                }
            };
            turn.calls.push(call);
        }
        turn
    }

    fn stop_strings(&self) -> Vec<String> {
        vec!["Observation:".to_string()]
    }
}

/// Code as action: each fenced Python block is a call of `tool` (default
/// `code_interpreter`) with `{"code": ...}`. An unclosed fence (generation stopped) runs to
/// the end of the text.
#[derive(Debug, Clone)]
pub struct CodeAction {
    /// The tool that runs the code.
    pub tool: String,
}

impl Default for CodeAction {
    fn default() -> Self {
        Self {
            tool: "code_interpreter".to_string(),
        }
    }
}

impl ToolCallFormat for CodeAction {
    fn name(&self) -> &'static str {
        "code"
    }

    fn parse(&self, text: &str) -> ParsedTurn {
        let mut calls = Vec::new();
        let mut empty_seen = false;
        let mut rest = text;
        while let Some(start) = rest.find("```") {
            let after = &rest[start + 3..];
            let line_end = after.find('\n').unwrap_or(after.len());
            let lang = after[..line_end].trim().to_ascii_lowercase();
            let body_start = (line_end + 1).min(after.len());
            let body = &after[body_start..];
            let (code, next) = match body.find("```") {
                Some(end) => (&body[..end], &body[end + 3..]),
                None => (body, ""),
            };
            if matches!(lang.as_str(), "python" | "py" | "python3") {
                let code = code.trim_end_matches("<|im_end|>").trim_end();
                if code.trim().is_empty() {
                    // Empty fences (a degenerate run of them, often) are one error, not many
                    // calls that do nothing.
                    if !empty_seen {
                        calls.push(CallParse::Malformed {
                            text: "```python\n```".into(),
                            error: "the code block is empty: write Python between the fences"
                                .into(),
                        });
                    }
                    empty_seen = true;
                } else {
                    calls.push(CallParse::Call(ToolCall {
                        name: self.tool.clone(),
                        arguments: serde_json::json!({ "code": code }),
                    }));
                }
            }
            rest = next;
        }
        ParsedTurn {
            calls,
            final_answer: None,
        }
    }
}
