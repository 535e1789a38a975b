//! `[rollout.external]`: episodes played by an agent program of the user's — any language,
//! any framework — against the trainer's own OpenAI-compatible endpoint.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the trainer runs an external agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalAgentConfig {
    /// The command run once per episode (program and arguments). A relative program path
    /// with a `/` is taken against the config file's directory. It gets `OPENAI_BASE_URL`
    /// (its session's URL), `OPENAI_API_KEY`, `AGENTFLY_REWARD_URL` (where it posts
    /// `{"reward": x}`), `AGENTFLY_SAMPLE` (the sample as JSON), `AGENTFLY_SAMPLE_ID`,
    /// `AGENTFLY_CHAIN` and `AGENTFLY_SYSTEM_PROMPT` (`agent.system_prompt`).
    pub command: Vec<String>,
    /// Its working directory (default: the config file's directory).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// More environment variables for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds an episode may take; past them the agent is killed and the episode counts
    /// as failed.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Describe the request's tools in the system message when the chat template has no
    /// tool syntax (off: the agent's system prompt describes them, as the jobs' prompts do).
    #[serde(default = "yes")]
    pub describe_tools: bool,
    /// The endpoint's address (port 0: a free one).
    #[serde(default = "default_listen")]
    pub listen: std::net::SocketAddr,
}

fn default_timeout() -> u64 {
    300
}

fn yes() -> bool {
    true
}

fn default_listen() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 0))
}

impl ExternalAgentConfig {
    /// Makes a relative program path (one with a `/`) and `cwd` absolute against `base`,
    /// and `cwd` default to `base`.
    pub fn resolve(&mut self, base: &Path) {
        let absolute = |p: &Path| {
            let joined = base.join(p);
            std::path::absolute(&joined).unwrap_or(joined)
        };
        if let Some(program) = self.command.first_mut()
            && program.contains('/')
            && Path::new(program.as_str()).is_relative()
        {
            *program = absolute(Path::new(program)).to_string_lossy().into_owned();
        }
        self.cwd = Some(absolute(self.cwd.as_deref().unwrap_or(Path::new("."))));
    }

    /// Checks the values; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.command.first().is_none_or(|p| p.trim().is_empty()) {
            return Err("rollout.external.command: name the program to run, e.g. [\"python3\", \"agent.py\"]".into());
        }
        if !self.listen.ip().is_loopback() {
            return Err(format!(
                "rollout.external.listen: {} is not a loopback address; the endpoint takes \
                 rewards from whoever reaches it, so it listens on 127.0.0.1 or ::1 only",
                self.listen
            ));
        }
        if self.timeout_secs == 0 {
            return Err("rollout.external.timeout_secs: must be at least 1".into());
        }
        Ok(())
    }
}

/// What `[rollout.external]` asks of the rest of the config: `external` as given, the
/// reward's name, whether tools or MCP servers are named, whether other servers roll out.
pub(super) fn check(
    external: Option<&ExternalAgentConfig>,
    reward: &str,
    tools: bool,
    servers: bool,
    format_bonus: f32,
) -> Result<(), String> {
    let Some(external) = external else {
        if reward.is_empty() {
            return Err(
                "agent.reward: name the reward that scores a chain (see `agentfly rewards`)".into(),
            );
        }
        return Ok(());
    };
    external.validate()?;
    if !reward.is_empty() {
        return Err(format!(
            "agent.reward: with [rollout.external] the agent posts its reward; remove `reward = \"{reward}\"`"
        ));
    }
    if servers {
        return Err("rollout.external: external agents sample from the trainer's engine, not from [rollout.llama_server] or [rollout.servers]".into());
    }
    if format_bonus != 0.0 {
        return Err("agent.format_bonus: with [rollout.external] the calls' outcomes are the agent's own, unknown to the trainer; set no bonus".into());
    }
    if tools {
        return Err("agent.tools: with [rollout.external] the agent runs its own tools; leave agent.tools and agent.mcp empty".into());
    }
    Ok(())
}
