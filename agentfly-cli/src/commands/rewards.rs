//! `agentfly rewards`: how trajectories can be scored.

use agentfly_core::Rewards;
use serde_json::json;
use std::fmt::Write;
use std::process::ExitCode;

/// Options of `agentfly rewards`.
#[derive(clap::Args)]
pub struct Args {
    /// Print a JSON array of `{name, description, fields, env}` instead.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rewards = Rewards::all()?;
    let mut out = String::new();
    if args.json {
        let list: Vec<_> = rewards
            .rewards()
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "description": r.description,
                    "fields": r.fields,
                    "env": r.env,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        super::print_listing(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "{} rewards:", rewards.rewards().len())?;
    for reward in rewards.rewards() {
        let fields = if reward.fields.is_empty() {
            "none".to_string()
        } else {
            reward.fields.join(", ")
        };
        writeln!(out, "\n  {}", reward.name)?;
        for line in reward.description.lines() {
            writeln!(out, "      {line}")?;
        }
        writeln!(out, "      sample fields read: {fields}")?;
        if let Some(env) = reward.env {
            writeln!(out, "      environment: {env}")?;
        }
        writeln!(out, "      defined in {}", reward.origin)?;
    }
    super::print_listing(&out)?;
    Ok(ExitCode::SUCCESS)
}
