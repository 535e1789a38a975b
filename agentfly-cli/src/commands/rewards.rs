//! `agentfly rewards`: how trajectories can be scored.

use agentfly_core::Rewards;
use serde_json::json;
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
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} rewards:", rewards.rewards().len());
    for reward in rewards.rewards() {
        let fields = if reward.fields.is_empty() {
            "none".to_string()
        } else {
            reward.fields.join(", ")
        };
        println!("\n  {}", reward.name);
        for line in reward.description.lines() {
            println!("      {line}");
        }
        println!("      sample fields read: {fields}");
        if let Some(env) = reward.env {
            println!("      environment: {env}");
        }
        println!("      defined in {}", reward.origin);
    }
    Ok(ExitCode::SUCCESS)
}
