//! `RemoteEnv`: an environment hosted by another program — a Python or Java text world such
//! as TextWorldExpress or ScienceWorld — spoken to over a small JSON protocol, and pooled
//! like any [`Env`].
//!
//! The server is either a child process started per instance (`command`; one JSON message
//! per line on its stdin/stdout, killed with everything it started when the instance goes)
//! or a running server reached over HTTP (`url`; `POST /<method>`). The repository's Python
//! module `agentfly_remote` (put on the child's `PYTHONPATH`) turns a gym-like environment
//! into such a server in a few lines; docs/REMOTE-ENVS.md has the protocol.
//!
//! Every call is bounded by a timeout and every answer by a size. A server that crashes,
//! stops answering or sends garbage makes the call fail with a [`RemoteError`]; the instance
//! is then *lost* — later calls fail at once, its health check fails, and its pool replaces
//! it — because the world's state after a half-done step cannot be known. A tool on a lost
//! instance should end its chain (see `agentfly_tools::world`).
//!
//! ```no_run
//! use agentfly_core::env::Env;
//! use agentfly_envs::{RemoteConfig, RemoteEnv};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let config = RemoteConfig {
//!     command: vec!["python3".into(), "my_world.py".into()],
//!     ..RemoteConfig::default()
//! };
//! let mut world = RemoteEnv::create(&config).await.unwrap();
//! let first = world.begin(Some(7), None).await.unwrap();
//! println!("{}", first.observation);
//! let next = world.step("open the door").await.unwrap();
//! println!("{} (reward {}, done {})", next.observation, next.reward, next.done);
//! # });
//! ```

mod config;
mod link;

pub use config::{RemoteConfig, RemoteError};

use agentfly_core::Sample;
use agentfly_core::env::{Env, EnvError};
use link::Link;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

/// What the world answered to a reset or a step.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct StepResult {
    /// The text the agent reads.
    pub observation: String,
    /// The step's reward.
    pub reward: f64,
    /// The episode is over (won, lost, or cut by the world's own limit).
    pub done: bool,
    /// The world cut the episode short (its step limit), rather than ending it.
    pub truncated: bool,
    /// The world's own progress score, when it keeps one (ScienceWorld's 0–100, a game's
    /// points), reported apart from the reward.
    pub score: Option<f64>,
    /// Whether the task was achieved, when the world says (usually once it is done).
    pub success: Option<bool>,
    /// The actions that make sense now, when the world lists them.
    pub valid_actions: Option<Vec<String>>,
    /// Anything else the world reported.
    pub info: Value,
}

/// The current episode, as the instance has seen it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Episode {
    /// Steps taken since the reset.
    pub steps: usize,
    /// The sum of the steps' rewards.
    pub total_reward: f64,
    /// The last score the world reported, if any.
    pub score: Option<f64>,
    /// The last word of the world on success, if any.
    pub success: Option<bool>,
    /// The episode ended (see [`StepResult::done`]).
    pub done: bool,
    /// The last answer (the reset's first, then each step's).
    pub last: Option<StepResult>,
}

/// One instance of a remote environment (see the [module docs](self)).
pub struct RemoteEnv {
    config: RemoteConfig,
    link: Option<Link>,
    instance: Value,
    server: Value,
    episode: Episode,
    /// Why the instance is lost, once it is.
    lost: Option<String>,
    /// Returned to its pool: the next step resets first.
    stale: bool,
    /// Closed on the server (or asked to be).
    closed: bool,
}

impl RemoteEnv {
    /// Connects (starting the server when it is a command) and creates one instance.
    pub async fn start(config: RemoteConfig) -> Result<RemoteEnv, RemoteError> {
        let (mut link, server) = Link::open(&config).await?;
        let created = link
            .call(
                "create",
                json!({"config": config.config}),
                config.start_timeout,
            )
            .await;
        let created = match created {
            Ok(created) => created,
            Err(e) => {
                link.kill();
                return Err(e);
            }
        };
        Ok(RemoteEnv {
            instance: created.get("instance").cloned().unwrap_or(Value::Null),
            config,
            link: Some(link),
            server,
            episode: Episode::default(),
            lost: None,
            stale: true,
            closed: false,
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    /// What the server said about itself (`hello`: protocol version, name, pid).
    pub fn server(&self) -> &Value {
        &self.server
    }

    /// The instance's id on its server.
    pub fn instance(&self) -> &Value {
        &self.instance
    }

    /// The child server's process id (stdio servers only).
    pub fn pid(&self) -> Option<u32> {
        self.link.as_ref().and_then(Link::pid)
    }

    /// The current episode.
    pub fn episode(&self) -> &Episode {
        &self.episode
    }

    /// Why the instance is lost, when it is: every call fails, and its pool replaces it.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// Starts an episode: `seed` picks the game, `sample`'s fields go to the world as its
    /// reset options.
    pub async fn begin(
        &mut self,
        seed: Option<u64>,
        sample: Option<&Sample>,
    ) -> Result<StepResult, RemoteError> {
        let mut params = json!({"instance": self.instance, "seed": seed});
        if let Some(sample) = sample {
            params["sample"] = Value::Object(sample.fields.clone());
        }
        let result = self.request("reset", params).await?;
        self.stale = false;
        self.episode = Episode {
            score: result.score,
            last: Some(result.clone()),
            ..Episode::default()
        };
        Ok(result)
    }

    /// Takes one action in the current episode (starting one first if the instance came
    /// back from its pool without a new sample).
    pub async fn step(&mut self, action: &str) -> Result<StepResult, RemoteError> {
        if self.stale {
            self.begin(None, None).await?;
        }
        let params = json!({"instance": self.instance, "action": action});
        let result = self.request("step", params).await?;
        let episode = &mut self.episode;
        episode.steps += 1;
        episode.total_reward += result.reward;
        episode.score = result.score.or(episode.score);
        episode.success = result.success.or(episode.success);
        episode.done = result.done;
        episode.last = Some(result.clone());
        Ok(result)
    }

    /// One `reset` or `step` within the call timeout; a fatal failure loses the instance.
    async fn request(&mut self, method: &str, params: Value) -> Result<StepResult, RemoteError> {
        let value = self.call(method, params, self.config.call_timeout).await?;
        serde_json::from_value(value).map_err(|e| {
            self.lose(format!("its `{method}` answer is not a step result: {e}"));
            RemoteError::Lost(self.lost.clone().unwrap_or_default())
        })
    }

    async fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RemoteError> {
        if let Some(why) = &self.lost {
            return Err(RemoteError::Lost(why.clone()));
        }
        let link = self
            .link
            .as_mut()
            .ok_or_else(|| RemoteError::Lost("closed".into()))?;
        let result = link.call(method, params, timeout).await;
        if let Err(e) = &result
            && e.is_fatal()
        {
            self.lose(e.to_string());
        }
        result
    }

    /// Marks the instance lost and kills a child server, or has an HTTP server close it.
    fn lose(&mut self, why: String) {
        self.close_detached();
        if let Some(link) = &mut self.link {
            link.kill();
        }
        self.lost = Some(why);
    }

    /// Has an HTTP server close the instance (once), without waiting.
    fn close_detached(&mut self) {
        if let Some(link) = &self.link
            && !self.closed
        {
            link.close_detached(&self.instance);
            self.closed = true;
        }
    }
}

impl Drop for RemoteEnv {
    fn drop(&mut self) {
        self.close_detached();
        if let Some(link) = &mut self.link {
            link.kill();
        }
    }
}

fn env_error(e: RemoteError) -> EnvError {
    EnvError::new(e.to_string())
}

impl Env for RemoteEnv {
    type Config = RemoteConfig;

    async fn create(config: &RemoteConfig) -> Result<Self, EnvError> {
        RemoteEnv::start(config.clone()).await.map_err(env_error)
    }

    /// With a sample: a new episode (its `seed` field, if any, picks the game). Without
    /// (back in the pool): forgets the episode; the next step starts a fresh one.
    async fn reset(&mut self, sample: Option<&Sample>) -> Result<(), EnvError> {
        if let Some(why) = &self.lost {
            return Err(EnvError::new(why.clone()));
        }
        match sample {
            Some(sample) => {
                let seed = sample.fields.get("seed").and_then(Value::as_u64);
                self.begin(seed, Some(sample)).await.map_err(env_error)?;
            }
            None => {
                self.stale = true;
                self.episode = Episode::default();
            }
        }
        Ok(())
    }

    async fn health_check(&mut self) -> Result<(), EnvError> {
        let timeout = self.config.call_timeout;
        self.call("health", json!({}), timeout)
            .await
            .map(drop)
            .map_err(env_error)
    }

    /// Closes the instance on its server — a lost one too (its server may still hold it,
    /// a JVM with it) — and stops a child server.
    async fn close(mut self) {
        let timeout = Duration::from_secs(5).min(self.config.call_timeout);
        let instance = json!({"instance": self.instance});
        if !self.closed
            && let Some(link) = &mut self.link
            && (self.lost.is_none() || matches!(link, Link::Http(_)))
        {
            let _ = link.call("close", instance, timeout).await;
            self.closed = true;
        }
        if let Some(link) = &mut self.link {
            link.kill();
        }
    }
}
