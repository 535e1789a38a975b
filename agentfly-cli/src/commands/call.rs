//! `agentfly call TOOL ARGS_JSON`: one tool call, as a chain would make it. A stateful tool
//! gets a fresh instance of its environment, closed when the call ends.

use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::{CallContext, Toolbox};
use serde_json::json;
use std::process::ExitCode;

/// Options of `agentfly call`.
#[derive(clap::Args)]
pub struct Args {
    /// The tool's name (see `agentfly tools`).
    tool: String,
    /// The arguments as one JSON object, e.g. '{"expression": "2+2"}'.
    #[arg(default_value = "{}")]
    args: String,
    /// Print `{"text": ..., "is_error": ...}` instead of the text.
    #[arg(long)]
    json: bool,
    /// An MCP server whose tools can be called too, started as a child process and spoken
    /// to over stdio: `--mcp 'npx -y @modelcontextprotocol/server-memory'` (repeatable).
    #[arg(long, value_name = "COMMAND ARGS")]
    mcp: Vec<String>,
}

/// Prints the observation; exits 1 when it is an error observation.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let toolbox = Toolbox::all()?;
    if let Some(spec) = toolbox.get(&args.tool) {
        let one = Toolbox::from_specs(vec![spec]);
        agentfly_tools::sandbox::check(&one, agentfly_tools::sandbox::Purpose::Evaluate, true)
            .map_err(anyhow::Error::msg)?;
        let needs = agentfly_tools::prepare::Needs {
            resources: None,
            default_corpus: Some(agentfly_envs::wiki::DEFAULT_CORPUS.into()),
            // A world tool called alone gets the default world's config: its own error.
            world: true,
        };
        agentfly_tools::prepare::prepare(&one, &needs).map_err(anyhow::Error::msg)?;
    }
    let runtime = super::mcp::runtime()?;
    let observation = runtime.block_on(async {
        let servers = super::mcp::start(&args.mcp).await?;
        let toolbox = servers.extend(toolbox.clone())?;
        let pools = EnvPools::new(PoolConfig {
            capacity: 1,
            ..PoolConfig::default()
        });
        let mut ctx = CallContext::with_pools(pools.clone());
        let observation = toolbox.call_json_in(&mut ctx, &args.tool, &args.args).await;
        drop(ctx);
        pools.close().await;
        servers.close().await;
        anyhow::Ok(observation)
    })?;
    // A sync tool abandoned at its timeout may still be running: don't wait for it.
    runtime.shutdown_background();
    if args.json {
        let out = json!({"text": observation.text, "is_error": observation.is_error});
        println!("{out}");
    } else if observation.is_error {
        eprintln!("{}", observation.text);
    } else {
        println!("{}", observation.text);
    }
    Ok(if observation.is_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
