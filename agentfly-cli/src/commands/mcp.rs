//! `--mcp 'COMMAND ARGS'`: MCP servers whose tools join a command's toolbox.

use agentfly_mcp::{McpServerConfig, McpServers};

/// The servers named by `--mcp` options, as configurations.
pub(crate) fn configs(lines: &[String]) -> anyhow::Result<Vec<McpServerConfig>> {
    Ok(lines
        .iter()
        .map(|line| McpServerConfig::from_command_line(line))
        .collect::<Result<Vec<_>, _>>()?)
}

/// The servers named by `--mcp` options, started and checked (each one's tools listed).
pub(crate) async fn start(lines: &[String]) -> anyhow::Result<McpServers> {
    Ok(McpServers::start(&configs(lines)?).await?)
}

/// A runtime for a command that talks to MCP servers (their sessions live on it).
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
