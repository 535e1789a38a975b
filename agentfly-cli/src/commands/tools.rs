//! `agentfly tools`: what the model can call.

use agentfly_core::{Rewards, ToolSpec, Toolbox};
use serde_json::Value;
use std::process::ExitCode;

/// Options of `agentfly tools`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the JSON array of schemas (OpenAI function-calling shape) instead.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let toolbox = Toolbox::all()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&toolbox.schemas())?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} tools:", toolbox.tools().len());
    for tool in toolbox.tools() {
        print_tool(tool);
    }
    let rewards = Rewards::all()?;
    println!(
        "\n{} rewards: {} (details: agentfly rewards)",
        rewards.names().len(),
        rewards.names().join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn print_tool(tool: &ToolSpec) {
    let mut flags = Vec::new();
    if tool.options.terminal {
        flags.push("terminal".to_string());
    }
    if let Some(env) = tool.options.env {
        flags.push(format!("env {env}"));
    }
    if let Some(ms) = tool.options.timeout_ms {
        flags.push(format!("timeout {ms} ms"));
    }
    if let Some(max) = tool.options.max_output_chars {
        flags.push(format!("output ≤ {max} chars"));
    }
    let flags = if flags.is_empty() {
        String::new()
    } else {
        format!("  [{}]", flags.join(", "))
    };
    println!("\n  {}{flags}", tool.name);
    for line in tool.description.lines() {
        println!("      {line}");
    }
    let parameters = (tool.parameters)();
    let required: Vec<&str> = parameters["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = parameters["properties"].as_object() {
        for (name, schema) in properties {
            let ty = match &schema["type"] {
                Value::String(t) => t.clone(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => "any".to_string(),
            };
            let need = if required.contains(&name.as_str()) {
                "required"
            } else {
                "optional"
            };
            let description = schema["description"].as_str().unwrap_or("");
            println!("      - {name} ({ty}, {need}) {description}");
        }
    }
    println!("      defined in {}", tool.origin);
}
