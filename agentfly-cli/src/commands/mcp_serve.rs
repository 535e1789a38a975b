//! `agentfly mcp-serve --tools NAMES`: registered tools served to any MCP client over stdio
//! (one session per process; a stateful tool's environment lives as long as the session).

use agentfly_core::Toolbox;
use agentfly_core::env::{EnvPools, PoolConfig};
use std::process::ExitCode;

/// Options of `agentfly mcp-serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The tools to serve, comma-separated (see `agentfly tools`).
    #[arg(long, value_delimiter = ',', required = true)]
    tools: Vec<String>,
    /// Let code tools reach the network when the sandbox cannot isolate it.
    #[arg(long)]
    allow_network: bool,
}

/// Serves until the client closes stdin. Everything but the protocol goes to stderr.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let toolbox = Toolbox::from_names(&args.tools)?;
    agentfly_tools::sandbox::check(
        &toolbox,
        agentfly_tools::sandbox::Purpose::Evaluate,
        args.allow_network,
    )
    .map_err(anyhow::Error::msg)?;
    let needs = agentfly_tools::prepare::Needs {
        resources: None,
        default_corpus: Some(agentfly_envs::wiki::DEFAULT_CORPUS.into()),
        world: false,
    };
    agentfly_tools::prepare::prepare(&toolbox, &needs).map_err(anyhow::Error::msg)?;
    let runtime = super::mcp::runtime()?;
    runtime.block_on(agentfly_mcp::serve_stdio(
        toolbox,
        EnvPools::new(PoolConfig::default()),
    ))?;
    runtime.shutdown_background();
    Ok(ExitCode::SUCCESS)
}
