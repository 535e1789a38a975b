//! The policy's chat side: its tokenizer and template, how an OpenAI conversation becomes
//! the messages the template renders, and how a reply's text becomes content and
//! `tool_calls` (Hermes: `<tool_call>{...}</tool_call>`, the format of Qwen's, Hermes' and
//! SmolLM2's templates).

use crate::ApiError;
use crate::request::{Message, text_of};
use agentfly_core::chat::{ChatError, ChatTemplate, Conversation, Tokenizer, to_python_json};
use agentfly_core::rollout::format::{CallParse, Hermes, ToolCallFormat};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// What the endpoint needs of a model besides its weights.
pub struct ChatModel {
    /// The name `/v1/models` lists.
    pub name: String,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) template: ChatTemplate,
    /// The ids that end a turn (the first is the one the template writes).
    pub(crate) end_of_turn: Vec<u32>,
    pub(crate) eot_text: String,
    /// The model's context length.
    pub(crate) context_len: usize,
    /// Does the template render `tools` itself? When not, they are described in the
    /// system message (as Qwen's template does).
    renders_tools: bool,
    describe_tools: bool,
    /// The text the model sampled for the calls it made, by call id: an assistant message
    /// the client sends back is rendered as the model wrote it, not as re-serialised JSON.
    written: Mutex<Written>,
}

/// A bounded memory of what the model wrote, by call id (oldest forgotten first).
#[derive(Default)]
struct Written {
    by_id: HashMap<String, String>,
    order: VecDeque<String>,
}

const WRITTEN_KEPT: usize = 65_536;

impl ChatModel {
    /// The model called `name`, with its chat parts (as `Pretrained::chat_parts` gives
    /// them) and context length.
    pub fn new(
        name: impl Into<String>,
        tokenizer: Tokenizer,
        template: ChatTemplate,
        end_of_turn: Vec<u32>,
        context_len: usize,
    ) -> Result<Self, ChatError> {
        let eot_text = match end_of_turn.first() {
            Some(&id) => tokenizer.decode(&[id], false)?,
            None => String::new(),
        };
        let probe = vec![json!({"role": "user", "content": "Hi"})];
        let tool = json!({"type": "function", "function": {"name": "agentfly_probe", "description": "probe", "parameters": {"type": "object", "properties": {}}}});
        let render = |tools: Option<Vec<Value>>| {
            template.render(&Conversation {
                messages: probe.clone(),
                tools,
                add_generation_prompt: true,
                ..Conversation::default()
            })
        };
        let renders_tools = render(Some(vec![tool]))? != render(None)?;
        Ok(Self {
            name: name.into(),
            tokenizer,
            template,
            end_of_turn,
            eot_text,
            context_len,
            renders_tools,
            describe_tools: true,
            written: Mutex::new(Written::default()),
        })
    }

    /// Whether tools are described in the system message when the template has no tool
    /// syntax (default true). Off, the client's own system prompt must describe them (as
    /// the jobs' prompts do, so a chain and an external agent render alike).
    pub fn describe_tools(mut self, on: bool) -> Self {
        self.describe_tools = on;
        self
    }

    /// Does the template render tools itself?
    pub fn renders_tools(&self) -> bool {
        self.renders_tools
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Renders `messages` (in the template's shape: an assistant's text as the model wrote
    /// it, a tool message with its `name`) with `tools`, described in the system message when
    /// the template has no tool syntax: the text a request's context is made of.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        generation_prompt: bool,
    ) -> Result<String, ApiError> {
        let tools = tools.filter(|t| !t.is_empty());
        let mut messages = messages.to_vec();
        let mut template_tools = None;
        match tools {
            Some(tools) if self.renders_tools => template_tools = Some(tools.to_vec()),
            Some(tools) if self.describe_tools => {
                let block = describe(tools);
                match messages.first_mut() {
                    Some(first) if first["role"] == "system" => {
                        let text = first["content"].as_str().unwrap_or_default().to_string();
                        first["content"] = Value::String(format!("{text}\n\n{block}"));
                    }
                    _ => messages.insert(0, json!({"role": "system", "content": block})),
                }
            }
            _ => {}
        }
        self.template
            .render(&Conversation {
                messages,
                tools: template_tools,
                add_generation_prompt: generation_prompt,
                ..Conversation::default()
            })
            .map_err(|e| {
                ApiError::bad(
                    "messages",
                    format!("the chat template cannot render these messages: {e}"),
                )
            })
    }

    /// Tokenizes rendered text.
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>, ApiError> {
        self.tokenizer
            .encode(text, false)
            .map_err(|e| ApiError::Internal(format!("tokenizing: {e}")))
    }

    /// The client's messages as the template renders them: an assistant message holds the
    /// text the model wrote (its calls as it wrote them), a tool message names its tool.
    pub(crate) fn template_messages(&self, messages: &[Message]) -> Vec<Value> {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            let text = text_of(m.content.as_ref()).unwrap_or_default();
            match m.role.as_str() {
                "system" | "developer" => out.push(json!({"role": "system", "content": text})),
                "user" => out.push(json!({"role": "user", "content": text})),
                "assistant" => {
                    let calls = m.tool_calls.as_deref().unwrap_or_default();
                    for call in calls {
                        names.insert(&call.id, &call.function.name);
                    }
                    let raw = calls.first().and_then(|c| written.by_id.get(&c.id));
                    let content = match raw {
                        Some(raw) => raw.clone(),
                        None => {
                            let mut content = text;
                            for call in calls {
                                let arguments: Value =
                                    serde_json::from_str(&call.function.arguments)
                                        .unwrap_or_else(|_| json!({}));
                                let call =
                                    json!({"name": call.function.name, "arguments": arguments});
                                if !content.is_empty() {
                                    content.push('\n');
                                }
                                content.push_str(&format!(
                                    "<tool_call>\n{}\n</tool_call>",
                                    to_python_json(&call, None)
                                ));
                            }
                            content
                        }
                    };
                    out.push(json!({"role": "assistant", "content": content}));
                }
                _ => {
                    let name = m
                        .tool_call_id
                        .as_deref()
                        .and_then(|id| names.get(id).copied())
                        .or(m.name.as_deref())
                        .unwrap_or_default();
                    out.push(json!({"role": "tool", "name": name, "content": text}));
                }
            }
        }
        out
    }

    /// Remembers that the call `id` was written as `raw`.
    pub(crate) fn remember(&self, id: &str, raw: &str) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.order.len() >= WRITTEN_KEPT
            && let Some(old) = written.order.pop_front()
        {
            written.by_id.remove(&old);
        }
        written.order.push_back(id.to_string());
        written.by_id.insert(id.to_string(), raw.to_string());
    }
}

/// The tools described as Qwen's (Hermes') template describes them.
fn describe(tools: &[Value]) -> String {
    let mut text = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        text.push('\n');
        text.push_str(&to_python_json(tool, None));
    }
    text.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": \
         <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    text
}

/// A reply read: its content and its calls (name, arguments).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Reply {
    pub content: Option<String>,
    pub calls: Vec<(String, Value)>,
}

/// Reads `text`'s Hermes calls when `tools_on`: the calls, and the text around them as the
/// content. When a call cannot be read, nothing is taken as a call and the whole text is
/// the content (the client sees what the model wrote).
pub(crate) fn read_reply(text: &str, tools_on: bool) -> Reply {
    let whole = Reply {
        content: Some(text.to_string()),
        calls: Vec::new(),
    };
    if !tools_on {
        return whole;
    }
    let parsed = Hermes.parse(text);
    if parsed.calls.is_empty() {
        return whole;
    }
    let mut calls = Vec::new();
    for call in parsed.calls {
        match call {
            CallParse::Call(c) => calls.push((c.name, c.arguments)),
            CallParse::Malformed { .. } => return whole,
        }
    }
    let content = text[..text.find("<tool_call>").unwrap_or(text.len())].trim();
    Reply {
        content: (!content.is_empty()).then(|| content.to_string()),
        calls,
    }
}
