//! `[rollout.external]`: each episode is played by the user's agent program against the
//! trainer's OpenAI-compatible endpoint, which serves the current policy and records the
//! session token for token; the agent posts the reward. The trajectories then train exactly
//! as a chain's do (groups per sample, advantages, masks, staleness).
//!
//! An agent that crashes, times out or never posts a reward leaves a failed trajectory
//! (no reward, an error saying why): counted, never trained on as a zero.

use super::error::TrainError;
use super::external_config::ExternalAgentConfig;
use agentfly_core::Sample;
use agentfly_core::rollout::{ChainConfig, ChainEnd, Policy, Trajectory, chain_seed};
use agentfly_serve::{
    ChatModel, PolicyRequests, Sampling, ServeConfig, Server, SessionOptions, policy_channel,
};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// The endpoint, and what drives its requests to the policy during a rollout.
pub(super) struct ExternalAgents {
    config: ExternalAgentConfig,
    server: Server,
    requests: tokio::sync::Mutex<PolicyRequests>,
    episodes: AtomicU64,
}

/// What a rollout plays: `samples` × `chains` episodes under `chain`'s sampling and budgets,
/// seeded by `seed`, `concurrency` at once.
pub(super) struct Plan<'a> {
    pub samples: &'a [Sample],
    pub chains: usize,
    pub chain: &'a ChainConfig,
    pub seed: u64,
    pub concurrency: usize,
}

/// The most bytes of an agent's stderr kept for its error.
const STDERR_KEPT: usize = 2000;

impl ExternalAgents {
    /// Starts the endpoint on `runtime` for `model`.
    pub(super) fn start(
        config: &ExternalAgentConfig,
        model: ChatModel,
        runtime: &tokio::runtime::Runtime,
    ) -> Result<Self, TrainError> {
        let (policy, requests) = policy_channel();
        let model = model.describe_tools(config.describe_tools);
        // A session lives as long as its episode may: none is forgotten mid-episode.
        let serve = ServeConfig {
            session_idle: Duration::from_secs(config.timeout_secs + 60)
                .max(ServeConfig::default().session_idle),
            ..ServeConfig::default()
        };
        let server = runtime
            .block_on(Server::start(model, Arc::new(policy), serve, config.listen))
            .map_err(|e| {
                TrainError::Engine(format!(
                    "rollout.external: the endpoint at {}: {e}",
                    config.listen
                ))
            })?;
        Ok(Self {
            config: config.clone(),
            server,
            requests: tokio::sync::Mutex::new(requests),
            episodes: AtomicU64::new(0),
        })
    }

    /// Plays `samples` × `chains` episodes, `concurrency` at once, with `policy` serving the
    /// endpoint; the trajectories in sample order, each sample's chains in order.
    pub(super) async fn rollout(
        &self,
        policy: &dyn Policy,
        plan: Plan<'_>,
        mut on_done: impl FnMut(&Trajectory),
    ) -> Vec<Trajectory> {
        let Plan {
            samples,
            chains,
            chain,
            seed,
            concurrency,
        } = plan;
        let mut requests = self.requests.lock().await;
        let jobs: Vec<(usize, &Sample, usize)> = samples
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..chains).map(move |c| (i, s, c)))
            .collect();
        let mut episodes = futures_util::stream::iter(jobs)
            .map(|(i, sample, c)| async move {
                let trajectory = self.episode(sample, i, c, chain, seed).await;
                ((i, c), trajectory)
            })
            .buffer_unordered(concurrency.max(1));
        let mut out = Vec::new();
        // Serves the endpoint's requests with `policy` while the episodes run (it never ends
        // on its own: the endpoint keeps its end of the channel).
        let serving = async {
            requests.serve(policy).await;
            std::future::pending::<()>().await
        };
        tokio::pin!(serving);
        loop {
            tokio::select! {
                next = episodes.next() => match next {
                    Some((key, trajectory)) => {
                        on_done(&trajectory);
                        out.push((key, trajectory));
                    }
                    None => break,
                },
                () = &mut serving => {}
            }
        }
        out.sort_by_key(|(key, _)| *key);
        out.into_iter().map(|(_, t)| t).collect()
    }

    /// One episode: the session opened with the run's sampling, the agent run to its end
    /// (or its timeout), what it recorded taken.
    async fn episode(
        &self,
        sample: &Sample,
        index: usize,
        chain_index: usize,
        chain: &ChainConfig,
        seed: u64,
    ) -> Trajectory {
        let start = Instant::now();
        let id = format!(
            "e{}-{index}-{chain_index}",
            self.episodes.fetch_add(1, Ordering::Relaxed)
        );
        let options = SessionOptions {
            sample_id: sample.id.clone(),
            chain: chain_index,
            sampling: Some(Sampling {
                temperature: chain.temperature,
                top_p: chain.top_p,
                top_k: chain.top_k,
                max_tokens: chain.max_tokens_per_turn,
                seed: chain_seed(seed, index, chain_index),
            }),
            max_turns: Some(chain.max_turns),
            max_total_tokens: Some(chain.max_total_tokens),
        };
        let failed = |error: String| Trajectory {
            sample_id: sample.id.clone(),
            chain: chain_index,
            finish_reason: ChainEnd::Error,
            error: Some(error),
            seconds: start.elapsed().as_secs_f64(),
            ..Trajectory::default()
        };
        if let Err(e) = self.server.open_session(&id, options) {
            return failed(format!("the episode's session: {e}"));
        }
        let ended = self
            .run_agent(sample, &id, chain_index, &chain.system_prompt)
            .await;
        let record = self.server.take_session(&id).await.unwrap_or_default();
        // One trajectory per episode, as a chain leaves: the last, which holds the episode's
        // end. When the agent rewrote its history, the earlier ones (other contexts) are not
        // learned from; `episode_trajectories` counts them all.
        let count = record.trajectories.len();
        let why = match (ended, record.reward) {
            (Ok(()), Some(_)) if count == 0 => {
                "the agent posted a reward but made no request to the model".to_string()
            }
            (_, Some(_)) => {
                let mut last = record.trajectories.into_iter().last().expect("counted");
                if count > 1 {
                    last.reward_metrics
                        .insert("episode_trajectories".into(), count as f64);
                }
                return last;
            }
            (Ok(()), None) => "the agent exited without posting a reward".to_string(),
            (Err(why), None) => why,
        };
        match record.trajectories.into_iter().last() {
            Some(mut last) => {
                last.finish_reason = ChainEnd::Error;
                last.error = Some(why);
                last.reward = None;
                last
            }
            None => failed(why),
        }
    }

    /// Runs the agent for session `id`; `Err` says how it failed.
    async fn run_agent(
        &self,
        sample: &Sample,
        id: &str,
        chain_index: usize,
        system_prompt: &str,
    ) -> Result<(), String> {
        let config = &self.config;
        let (program, args) = config.command.split_first().ok_or("no command")?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .envs(&config.env)
            .env("OPENAI_BASE_URL", self.server.session_url(id))
            .env("OPENAI_API_KEY", "agentfly")
            .env(
                "AGENTFLY_REWARD_URL",
                format!("http://{}/sessions/{id}/reward", self.server.addr()),
            )
            .env(
                "AGENTFLY_SAMPLE",
                serde_json::to_string(sample).unwrap_or_default(),
            )
            .env("AGENTFLY_SAMPLE_ID", &sample.id)
            .env("AGENTFLY_CHAIN", chain_index.to_string())
            .env("AGENTFLY_SYSTEM_PROMPT", system_prompt)
            // The trainer's own binary: `agentfly call` runs a registered tool for the agent.
            .env("AGENTFLY_EXE", std::env::current_exe().unwrap_or_default())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|e| {
            format!(
                "the agent `{}` could not start: {e}",
                config.command.join(" ")
            )
        })?;
        // The end of its stderr, kept bounded while it runs.
        let stderr = child.stderr.take();
        let reader = tokio::spawn(async move {
            let mut tail = Vec::new();
            let Some(mut stderr) = stderr else {
                return tail;
            };
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > 2 * STDERR_KEPT {
                    tail.drain(..tail.len() - STDERR_KEPT);
                }
            }
            tail
        });
        let limit = Duration::from_secs(config.timeout_secs);
        let status = tokio::time::timeout(limit, child.wait()).await;
        // Whatever it started and left behind goes with it (a child still holding its stderr
        // would otherwise keep this episode waiting).
        kill_group(&mut child).await;
        let stderr = tokio::time::timeout(Duration::from_secs(2), reader)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let Ok(status) = status else {
            return Err(format!(
                "the agent was killed after its {} s (rollout.external.timeout_secs)",
                config.timeout_secs
            ));
        };
        let tail = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(STDERR_KEPT)..])
            .trim()
            .to_string();
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!(
                "the agent exited with {s}; its stderr ends: {tail}"
            )),
            Err(e) => Err(format!("waiting for the agent: {e}")),
        }
    }
}

/// Kills the agent and whatever it started (its process group).
async fn kill_group(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill().await;
}
