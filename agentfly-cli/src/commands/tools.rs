//! `agentfly tools`: what the model can call.

use agentfly_core::{Rewards, ToolSpec, Toolbox};
use serde_json::Value;
use std::fmt::Write;
use std::process::ExitCode;

/// Options of `agentfly tools`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the JSON array of schemas (OpenAI function-calling shape) instead.
    #[arg(long)]
    json: bool,
    /// List the tools of this MCP server instead, started as a child process and spoken to
    /// over stdio: `--mcp 'npx -y @modelcontextprotocol/server-memory'` (repeatable).
    #[arg(long, value_name = "COMMAND ARGS")]
    mcp: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.mcp.is_empty() {
        return super::mcp::runtime()?.block_on(async {
            let servers = super::mcp::start(&args.mcp).await?;
            let toolbox = Toolbox::from_specs(servers.tools().to_vec());
            let listed = list(&toolbox, args.json, false);
            servers.close().await;
            listed
        });
    }
    list(&Toolbox::all()?, args.json, true)
}

/// Prints `toolbox` (and the linked rewards when `rewards`).
fn list(toolbox: &Toolbox, json: bool, rewards: bool) -> anyhow::Result<ExitCode> {
    let mut out = String::new();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&toolbox.schemas())?)?;
        super::print_listing(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "{} tools:", toolbox.tools().len())?;
    for tool in toolbox.tools() {
        print_tool(&mut out, tool)?;
    }
    if rewards {
        let rewards = Rewards::all()?;
        writeln!(
            out,
            "\n{} rewards: {} (details: agentfly rewards)",
            rewards.names().len(),
            rewards.names().join(", ")
        )?;
    }
    super::print_listing(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn print_tool(out: &mut String, tool: &ToolSpec) -> std::fmt::Result {
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
    writeln!(out, "\n  {}{flags}", tool.name)?;
    for line in tool.description.lines() {
        writeln!(out, "      {line}")?;
    }
    let parameters = tool.parameters_schema();
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
            writeln!(out, "      - {name} ({ty}, {need}) {description}")?;
        }
    }
    writeln!(out, "      defined in {}", tool.origin)
}
