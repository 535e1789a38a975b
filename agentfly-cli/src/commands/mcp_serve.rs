//! `agentfly mcp-serve --tools NAMES`: registered tools served to any MCP client over stdio
//! (one session per process), or over streamable HTTP with `--http ADDR` (one session per
//! `Mcp-Session-Id`); a stateful tool's environment lives as long as its session.

use agentfly_core::Toolbox;
use agentfly_core::env::{EnvPools, PoolConfig};
use std::process::ExitCode;

/// Options of `agentfly mcp-serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The tools to serve, comma-separated (see `agentfly tools`).
    #[arg(long, value_delimiter = ',', required = true)]
    tools: Vec<String>,
    /// Serve over streamable HTTP at `http://ADDR/mcp` (e.g. `127.0.0.1:8000`; port 0
    /// picks a free one) instead of stdio, until interrupted. The URL goes to stderr.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Let code tools reach the network when the sandbox cannot isolate it.
    #[arg(long)]
    allow_network: bool,
}

/// Serves until the client closes stdin (or, over HTTP, until SIGINT or SIGTERM).
/// Everything but the protocol goes to stderr.
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
    let pools = EnvPools::new(PoolConfig::default());
    match args.http {
        None => runtime.block_on(agentfly_mcp::serve_stdio(toolbox, pools))?,
        Some(addr) => runtime.block_on(serve_http(toolbox, pools, addr))?,
    }
    runtime.shutdown_background();
    Ok(ExitCode::SUCCESS)
}

async fn serve_http(
    toolbox: Toolbox,
    pools: EnvPools,
    addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
    let names = toolbox.names().join(", ");
    let server = agentfly_mcp::serve_http(toolbox, pools, addr).await?;
    eprintln!("agentfly mcp-serve: {names} at {}", server.url());
    super::until_stopped().await?;
    eprintln!("agentfly mcp-serve: stopping");
    server.shutdown().await;
    Ok(())
}
