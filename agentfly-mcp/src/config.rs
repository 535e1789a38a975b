//! One MCP server, as a configuration names it (`[[agent.mcp]]`) or the command line does
//! (`--mcp 'COMMAND ARGS'`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `{session_dir}` in a server's `args` and `env` is replaced with: a directory made
/// for each session and removed with it (where a server keeps its state, such as the
/// memory server's `MEMORY_FILE_PATH`, so no two sessions share it).
pub const SESSION_DIR: &str = "{session_dir}";

/// An MCP server whose tools join the chains' toolbox: a child process spoken to over its
/// stdin and stdout (`command`, `args`, `env`), or a server at a streamable-HTTP `url`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name, in messages and in each tool's origin.
    pub name: String,
    /// The program to run (stdio).
    pub command: Option<String>,
    /// Its arguments; `{session_dir}` is the session's own directory.
    pub args: Vec<String>,
    /// Variables added to its environment; `{session_dir}` as in `args`.
    pub env: BTreeMap<String, String>,
    /// The directory it runs in (default: the session's own directory, `{session_dir}`),
    /// so relative paths in `args`, and those the model passes, resolve there. In a
    /// configuration file a relative `cwd` is relative to the file's directory.
    pub cwd: Option<PathBuf>,
    /// Or the URL of a streamable-HTTP server.
    pub url: Option<String>,
    /// One session serves every chain at once (a stateless server). Otherwise each chain
    /// gets a session of its own from a pool, replaced by a fresh one between chains.
    pub shared: bool,
    /// Only these of the server's tools join (default: all of them).
    pub tools: Option<Vec<String>>,
    /// The most sessions at once (chains using the server at once).
    pub max_sessions: usize,
    /// The longest one call may take, in seconds; past it the session is replaced and the
    /// chain ends with an error, as a lost world does.
    pub call_timeout_secs: u64,
    /// The longest a session may take to start and answer `initialize`, in seconds.
    pub start_timeout_secs: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            shared: false,
            tools: None,
            max_sessions: 8,
            call_timeout_secs: 60,
            start_timeout_secs: 60,
        }
    }
}

/// A server configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP server `{server}`: {message}")]
pub struct ConfigError {
    /// The server's name (or its command line).
    pub server: String,
    /// What is wrong.
    pub message: String,
}

impl McpServerConfig {
    /// A stdio server from a shell-like command line (`--mcp 'npx -y some-server /tmp'`),
    /// named after its program.
    pub fn from_command_line(line: &str) -> Result<Self, ConfigError> {
        let error = |message: &str| ConfigError {
            server: line.to_string(),
            message: message.to_string(),
        };
        let words = shlex::split(line).ok_or_else(|| error("unbalanced quotes"))?;
        let (command, args) = words.split_first().ok_or_else(|| error("no command"))?;
        let name = std::path::Path::new(command)
            .file_name()
            .map_or(command.clone(), |n| n.to_string_lossy().into_owned());
        let config = Self {
            name,
            command: Some(command.clone()),
            args: args.to_vec(),
            ..Self::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks that the server can be reached one way, and the bounds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let error = |message: String| ConfigError {
            server: if self.name.is_empty() {
                self.command
                    .clone()
                    .or(self.url.clone())
                    .unwrap_or_default()
            } else {
                self.name.clone()
            },
            message,
        };
        if self.name.trim().is_empty() {
            return Err(error("`name` is empty".into()));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(error(
                    "give `command` (stdio) or `url` (HTTP), not both".into(),
                ));
            }
            (None, None) => return Err(error("give `command` (stdio) or `url` (HTTP)".into())),
            (None, Some(url)) if !url.starts_with("http://") => {
                return Err(error(format!(
                    "`url` {url}: only plain http:// servers are supported (no TLS)"
                )));
            }
            (Some(command), None) if command.trim().is_empty() => {
                return Err(error("`command` is empty".into()));
            }
            (None, Some(_)) if self.cwd.is_some() => {
                return Err(error(
                    "`cwd` is for a server agentfly starts (`command`), not one at a `url`".into(),
                ));
            }
            _ => {}
        }
        if self.max_sessions == 0 {
            return Err(error("`max_sessions` must be at least 1".into()));
        }
        if self.call_timeout_secs == 0 || self.start_timeout_secs == 0 {
            return Err(error("timeouts must be at least 1 second".into()));
        }
        Ok(())
    }

    /// What the server is, for messages: its command line or its URL.
    pub fn describe(&self) -> String {
        match (&self.command, &self.url) {
            (Some(command), _) => std::iter::once(command.as_str())
                .chain(self.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_is_split_as_a_shell_would() {
        let c = McpServerConfig::from_command_line("npx -y 'my server' \"a b\"").unwrap();
        assert_eq!(c.name, "npx");
        assert_eq!(c.command.as_deref(), Some("npx"));
        assert_eq!(c.args, ["-y", "my server", "a b"]);
        assert!(McpServerConfig::from_command_line("").is_err());
        assert!(McpServerConfig::from_command_line("npx 'open").is_err());
    }

    #[test]
    fn a_server_is_reached_one_way() {
        let both = McpServerConfig {
            name: "x".into(),
            command: Some("a".into()),
            url: Some("http://h/mcp".into()),
            ..McpServerConfig::default()
        };
        assert!(
            both.validate()
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        let tls = McpServerConfig {
            name: "x".into(),
            url: Some("https://h/mcp".into()),
            ..McpServerConfig::default()
        };
        assert!(tls.validate().unwrap_err().to_string().contains("http://"));
    }
}
