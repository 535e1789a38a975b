//! `agentfly generate`: a continuation of a prompt or of a chat conversation.

use super::model_args::ModelArgs;
use agentfly_core::chat::Conversation;
use agentfly_engine::generate::{FinishReason, SamplingParams, generate};
use anyhow::{Context, bail};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly generate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Raw prompt text (no chat template).
    #[arg(
        long,
        conflicts_with = "messages",
        required_unless_present = "messages"
    )]
    prompt: Option<String>,
    /// A JSON file `{"messages": [...], "tools": [...]}`, rendered with the model's chat
    /// template and the generation prompt.
    #[arg(long)]
    messages: Option<PathBuf>,
    /// Most new tokens.
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// Greedy decoding (the default unless --temperature is given).
    #[arg(long, conflicts_with_all = ["temperature", "top_p", "top_k"])]
    greedy: bool,
    /// Sampling temperature (> 0).
    #[arg(long)]
    temperature: Option<f32>,
    /// Nucleus sampling threshold.
    #[arg(long)]
    top_p: Option<f32>,
    /// Keep only the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep going past the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Print {"prompt_ids", "new_ids", "text", "finish_reason"}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args
        .temperature
        .is_some_and(|t| !(t > 0.0 && t.is_finite()))
    {
        bail!("--temperature must be a positive number (use --greedy for argmax)");
    }
    if args.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
        bail!("--top-p must be in (0, 1]");
    }
    let model = args.model.load()?;
    let tokenizer = model
        .tokenizer
        .as_ref()
        .with_context(|| format!("{} has no tokenizer", args.model.model.display()))?;
    let prompt = match (&args.prompt, &args.messages) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let mut conversation: Conversation =
                serde_json::from_str(&text).with_context(|| {
                    format!(
                        "{}: expected {{\"messages\": [...], \"tools\": [...]}}",
                        path.display()
                    )
                })?;
            conversation.add_generation_prompt = true;
            let template = model
                .chat_template()?
                .with_context(|| format!("{} has no chat template", args.model.model.display()))?;
            template.render(&conversation)?
        }
        (None, None) => unreachable!("clap requires one"),
    };
    let prompt_ids = tokenizer.encode(&prompt, false)?;
    let params = SamplingParams {
        max_new_tokens: args.max_new_tokens,
        temperature: args.temperature.unwrap_or(0.0),
        top_p: args.top_p.unwrap_or(1.0),
        top_k: args.top_k.unwrap_or(0),
        seed: args.seed,
        ignore_eos: args.ignore_eos,
        ..SamplingParams::default()
    };
    let out = generate(
        &model,
        std::slice::from_ref(&prompt_ids),
        &params,
        Some(tokenizer),
    )?
    .pop()
    .expect("one prompt, one output");
    // The text without the stop token that ended it.
    let shown = match (out.finish_reason, out.new_ids.last()) {
        (FinishReason::Stop, Some(last)) if model.eos_ids().contains(last) => {
            &out.new_ids[..out.new_ids.len() - 1]
        }
        _ => &out.new_ids[..],
    };
    let text = tokenizer.decode(shown, false)?;
    if args.json {
        let finish = serde_json::to_value(out.finish_reason)?;
        println!(
            "{}",
            json!({"prompt_ids": prompt_ids, "new_ids": out.new_ids, "text": text, "finish_reason": finish})
        );
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}
