//! Chat templates: Hugging Face's Jinja templates rendered with minijinja, set up as
//! transformers sets up jinja2 (trim and lstrip blocks, loop controls, Python string
//! methods, `raise_exception`, a `tojson` that writes what Python's `json.dumps` writes),
//! so a conversation renders byte for byte as `apply_chat_template` renders it.

use super::{ChatError, to_python_json};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Map;
use std::path::Path;

/// What a template renders: the messages, the tools' schemas, whether to open the
/// assistant's turn, and any extra variables (e.g. `enable_thinking`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Messages as JSON objects (`role`, `content`, `tool_calls`, ...).
    pub messages: Vec<serde_json::Value>,
    /// Tool schemas in the OpenAI function-calling shape; `None` when there are none.
    #[serde(default)]
    pub tools: Option<Vec<serde_json::Value>>,
    /// End with the opening of the assistant's turn.
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Other template variables.
    #[serde(flatten)]
    pub extra: Map<String, serde_json::Value>,
}

/// A compiled chat template.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`, a Jinja chat template.
    pub fn new(source: impl Into<String>) -> Result<Self, ChatError> {
        let source = source.into();
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(ChatError::TemplateSyntax)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.clone())
            .map_err(ChatError::TemplateSyntax)?;
        Ok(Self {
            env,
            source,
            bos_token: None,
            eos_token: None,
        })
    }

    /// Sets the `bos_token` and `eos_token` variables templates may use.
    pub fn with_special_tokens(mut self, bos: Option<String>, eos: Option<String>) -> Self {
        self.bos_token = bos;
        self.eos_token = eos;
        self
    }

    /// Reads a template from a `.jinja` file, or the `chat_template` of a
    /// `tokenizer_config.json` (with its `bos_token` / `eos_token`).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ChatError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ChatError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "json") {
            let config: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| ChatError::BadFile {
                    path: path.to_path_buf(),
                    message: format!("not valid JSON: {e}"),
                })?;
            Self::from_tokenizer_config(&config).map_err(|e| match e {
                ChatError::NoTemplate(_) => ChatError::NoTemplate(path.display().to_string()),
                other => other,
            })
        } else {
            Self::new(text)
        }
    }

    /// The template of a parsed `tokenizer_config.json`: `chat_template` as a string, or
    /// the `default` entry of a list of `{name, template}`.
    pub fn from_tokenizer_config(config: &serde_json::Value) -> Result<Self, ChatError> {
        let source = match &config["chat_template"] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(list) => list
                .iter()
                .find(|t| t["name"] == "default")
                .or_else(|| list.first())
                .and_then(|t| t["template"].as_str())
                .map(str::to_string)
                .ok_or_else(|| ChatError::NoTemplate("tokenizer_config.json".into()))?,
            _ => return Err(ChatError::NoTemplate("tokenizer_config.json".into())),
        };
        let token = |key: &str| match &config[key] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(o) => {
                o.get("content").and_then(|c| c.as_str()).map(String::from)
            }
            _ => None,
        };
        Ok(Self::new(source)?.with_special_tokens(token("bos_token"), token("eos_token")))
    }

    /// The template's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `conversation`.
    pub fn render(&self, conversation: &Conversation) -> Result<String, ChatError> {
        let mut vars = conversation.extra.clone();
        vars.insert(
            "messages".into(),
            serde_json::Value::from(conversation.messages.clone()),
        );
        vars.insert(
            "tools".into(),
            conversation
                .tools
                .clone()
                .map_or(serde_json::Value::Null, serde_json::Value::from),
        );
        vars.insert(
            "add_generation_prompt".into(),
            conversation.add_generation_prompt.into(),
        );
        for (key, token) in [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
        ] {
            if let Some(token) = token {
                vars.entry(key).or_insert_with(|| token.clone().into());
            }
        }
        let template = self
            .env
            .get_template(NAME)
            .map_err(ChatError::TemplateRender)?;
        template
            .render(Value::from(Serde(&vars)))
            .map_err(ChatError::TemplateRender)
    }

    /// The token that closes an assistant turn as this template renders one: the first
    /// token after an assistant message's text, when it is one of `tokenizer`'s special
    /// tokens (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`...). `None` when the template
    /// ends turns with plain text or with nothing. This, not the model's first
    /// end-of-sequence id, is what a chain stops at and learns to emit: Llama 3 lists
    /// `<|end_of_text|>` before `<|eot_id|>`.
    pub fn end_of_turn(&self, tokenizer: &super::Tokenizer) -> Result<Option<u32>, ChatError> {
        const PROBE: &str = "agentfly end-of-turn probe";
        let text = self.render(&Conversation {
            messages: vec![
                serde_json::json!({"role": "user", "content": "Hi"}),
                serde_json::json!({"role": "assistant", "content": PROBE}),
            ],
            ..Conversation::default()
        })?;
        let Some(at) = text.rfind(PROBE) else {
            return Ok(None);
        };
        let after = tokenizer.encode(&text[at + PROBE.len()..], false)?;
        Ok(after
            .first()
            .copied()
            .filter(|&id| tokenizer.is_special(id)))
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `tojson`: `json.dumps(value, ensure_ascii=False, indent=indent)`.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(to_python_json(&value, indent)))
}
