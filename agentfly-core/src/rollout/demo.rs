//! Demonstrations for supervised warm starts: a whole conversation tokenized the way a
//! chain builds its trajectory, with mask 1 on the assistant's turns.

use super::chain::{TURN_MARKER, text_after_turn};
use crate::chat::{ChatError, ChatTemplate, Conversation, Tokenizer};
use serde_json::Value;

/// A conversation that cannot be made into a demonstration.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Rendering or tokenizing failed.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// The template drops an assistant message's text.
    #[error("the chat template drops the text of assistant message {0}")]
    NotAppendOnly(usize),
    /// There is no assistant message to learn from.
    #[error("the conversation has no assistant message")]
    NoAssistant,
}

/// The tokens of `messages` exactly as a chain that produced this conversation holds
/// them, and its loss mask: the prompt (everything before the first assistant message)
/// and what the environment appended after each assistant turn (the template's rendering,
/// taken as a chain takes it) have mask 0; each assistant message's tokens and the
/// `end_of_turn` id that closes it have mask 1. `tools` are rendered as the chains render
/// them. Messages after the last assistant message are not included.
pub fn demonstration(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[Value],
    tools: Option<Vec<Value>>,
    end_of_turn: u32,
) -> Result<(Vec<u32>, Vec<u8>), DemoError> {
    let render = |messages: &[Value]| {
        template.render(&Conversation {
            messages: messages.to_vec(),
            tools: tools.clone(),
            add_generation_prompt: true,
            ..Conversation::default()
        })
    };
    let assistants: Vec<usize> = (0..messages.len())
        .filter(|&i| messages[i]["role"] == "assistant")
        .collect();
    let Some(&first) = assistants.first() else {
        return Err(DemoError::NoAssistant);
    };
    let eot_text = tokenizer.decode(&[end_of_turn], false)?;
    let mut tokens = tokenizer.encode(&render(&messages[..first])?, false)?;
    let mut mask = vec![0u8; tokens.len()];
    for (n, &i) in assistants.iter().enumerate() {
        let text = messages[i]["content"].as_str().unwrap_or_default();
        let mut own = tokenizer.encode(text, false)?;
        own.push(end_of_turn);
        mask.extend(std::iter::repeat_n(1, own.len()));
        tokens.extend(own);
        let Some(&next) = assistants.get(n + 1) else {
            break;
        };
        // What the environment appends, as a chain computes it.
        let mut shown = messages[..next].to_vec();
        shown[i]["content"] = Value::String(TURN_MARKER.into());
        let rendered = render(&shown)?;
        let env = text_after_turn(&rendered, &eot_text, true).ok_or(DemoError::NotAppendOnly(i))?;
        let ids = tokenizer.encode(env, false)?;
        mask.extend(std::iter::repeat_n(0, ids.len()));
        tokens.extend(ids);
    }
    Ok((tokens, mask))
}
