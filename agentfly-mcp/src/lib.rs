//! MCP (the Model Context Protocol) for agentfly, on the official Rust SDK (`rmcp`): the
//! tools of any MCP server join a chain's toolbox beside the `#[tool]` functions, in every
//! call format (code as action included).
//!
//! | module | what lives there |
//! |---|---|
//! | [`config`] | [`McpServerConfig`]: a server as `[[agent.mcp]]` or `--mcp 'COMMAND ARGS'` names it |
//! | [`session`] | [`McpSession`]: one connected session, an environment its pool leases per chain |
//! | [`tools`] | [`McpServers`]: the servers of a run and their tools as agentfly tools |
//! | [`serve`] | the other way: registered `#[tool]` functions served to any MCP client ([`serve_stdio`], [`serve_http`]) |
//!
//! A stateful server (the default) gives each chain a session of its own, from a bounded
//! pool, replaced by a fresh one (a new process, a new `{session_dir}`) before another chain
//! uses it, so no chain sees what another left. A stateless one may be `shared` by every
//! chain. Every call is bounded (`call_timeout_secs`); an `isError` result is an error
//! observation the model reads; a session that crashes, hangs or breaks the protocol is
//! replaced and the chain ends with finish reason `error`, as a lost world does.
//!
//! The other way, a tool crate serves any MCP client in a few lines:
//!
//! ```no_run
//! # async fn serve() -> Result<(), agentfly_mcp::McpError> {
//! use agentfly_core::Toolbox;
//! use agentfly_core::env::{EnvPools, PoolConfig};
//!
//! let toolbox = Toolbox::from_names(&["calculator"]).map_err(|e| agentfly_mcp::McpError(e.to_string()))?;
//! agentfly_mcp::serve_stdio(toolbox, EnvPools::new(PoolConfig::default())).await
//! # }
//! ```

#![warn(missing_docs)]

pub mod config;
pub mod serve;
pub mod session;
pub mod tools;

pub use config::McpServerConfig;
pub use serve::{HttpServer, ToolServer, serve_http, serve_stdio};
pub use session::McpSession;
pub use tools::{McpError, McpServers};
