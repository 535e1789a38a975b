//! `agentfly render`: a chat template applied to a conversation, printed exactly.

use agentfly_core::chat::{ChatTemplate, Conversation};
use anyhow::Context;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly render`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A tokenizer_config.json (its `chat_template`) or a .jinja file.
    #[arg(long)]
    template: PathBuf,
    /// A JSON file with `messages`, optional `tools` and `add_generation_prompt`.
    #[arg(long)]
    conversation: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let template = ChatTemplate::from_file(&args.template)?;
    let text = std::fs::read_to_string(&args.conversation)
        .with_context(|| format!("reading {}", args.conversation.display()))?;
    let conversation: Conversation = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected {{\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": bool}}", args.conversation.display())
    })?;
    let rendered = template.render(&conversation)?;
    // Exactly the rendered text: no newline added.
    std::io::stdout().write_all(rendered.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
