//! [`Trainer`]: a training run — the actor, its reference and critic, the engine that
//! samples from a copy of the actor, the tools, the reward and the data — and what every
//! stage of it shares: rolling out chains and evaluating held-out samples.

use super::batch::Batch;
use super::config::TrainerConfig;
use super::error::{TrainError, io};
use super::eval::{EvalReport, failed_of};
use super::generator::Generator;
use super::sampler::Sampler;
use super::shaping::shape;
use crate::train::{Actor, Critic, Reference};
use agentfly_core::chat::{ChatTemplate, Tokenizer};
use agentfly_core::env::EnvPools;
use agentfly_core::rollout::format::ToolCallFormat;
use agentfly_core::rollout::{ChainConfig, ChainSetup, Rollout, RolloutSummary, Trajectory};
use agentfly_core::{Rewards, Sample, Toolbox};
use agentfly_model::model::ModelConfig;
use burn::tensor::Device;
use serde_json::Value;
use std::path::Path;

/// A training run. Built by [`Trainer::new`] (resuming from the latest checkpoint) or
/// [`Trainer::with_model`] (to evaluate a model); see `setup.rs`.
pub struct Trainer {
    pub(super) config: TrainerConfig,
    pub(super) chains: Chains,
    pub(super) model_config: ModelConfig,
    pub(super) tokenizer_config: Option<Value>,
    pub(super) actor: Actor,
    pub(super) reference: Option<Reference>,
    pub(super) critic: Option<Critic>,
    pub(super) sampler: Sampler,
    /// A batch rolled out while the previous step updated (`rollout.overlap`), waiting
    /// for its own update; kept in checkpoints.
    pub(super) pending: Option<Batch>,
    pub(super) eval: Vec<Sample>,
    pub(super) step: usize,
    pub(super) sft_done: bool,
    pub(super) resumed_from: usize,
    pub(super) device: Device,
    /// The policy's weights as last written: their version and the model directory that
    /// holds them. A save of the same version links those files instead of writing them.
    pub(super) written: std::sync::Mutex<Option<(u64, std::path::PathBuf)>>,
    /// The checkpoint being written in the background: its weights' version and directory.
    pub(super) writing: std::sync::Mutex<Option<Writing>>,
    /// The run's TensorBoard event files, opened on first use.
    pub(super) boards: std::sync::Mutex<crate::tensorboard::EventFiles>,
}

/// A checkpoint being written on a thread of its own: the version of the weights it holds
/// and its directory, once written.
pub(super) type Writing = std::thread::JoinHandle<Result<(u64, std::path::PathBuf), TrainError>>;

/// What rolls chains out: the engine serving a copy of the policy, the tools, the
/// reward, the format and the chat template. Apart from the policy being trained, so a
/// rollout can run while the policy updates.
pub(super) struct Chains {
    pub(super) toolbox: Toolbox,
    pub(super) rewards: Rewards,
    pub(super) format: Box<dyn ToolCallFormat>,
    pub(super) tokenizer: Tokenizer,
    pub(super) template: ChatTemplate,
    pub(super) eos: Vec<u32>,
    pub(super) generator: Generator,
    pub(super) pools: EnvPools,
    /// The MCP servers whose tools are in `toolbox` (their sessions stop with them).
    pub(super) _mcp: Option<agentfly_mcp::McpServers>,
    /// `[rollout.external]`: the endpoint the user's agents play their episodes against.
    pub(super) external: Option<super::external::ExternalAgents>,
    pub(super) runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("step", &self.step)
            .field("output", &self.config.output.dir)
            .finish()
    }
}

impl Trainer {
    /// The configuration.
    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    /// The pools the chains lease their environments from. A pool whose environment
    /// needs a configuration of its own (a remote world's server) is inserted here before
    /// training or evaluating; any other is made with its config's default on first use.
    pub fn env_pools(&self) -> &EnvPools {
        &self.chains.pools
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.step
    }

    /// The policy being trained.
    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// The frozen reference, when the run has one (a KL penalty, `track_kl`, REINFORCE++'s
    /// KL in the reward).
    pub fn reference(&self) -> Option<&Reference> {
        self.reference.as_ref()
    }

    /// The critic, when the estimator needs values (GAE).
    pub fn critic(&self) -> Option<&Critic> {
        self.critic.as_ref()
    }

    /// The held-out samples of `data.eval`.
    pub fn eval_samples(&self) -> &[Sample] {
        &self.eval
    }

    /// Rolls out `samples` × `chains` with the current policy; `on_done` sees each
    /// trajectory as it finishes (shaped, when `agent.format_bonus` is set).
    pub fn rollout(
        &self,
        samples: &[Sample],
        chains: usize,
        chain: &ChainConfig,
        seed: u64,
        on_done: impl FnMut(&Trajectory),
    ) -> Result<(Vec<Trajectory>, RolloutSummary), TrainError> {
        self.chains
            .rollout(&self.config, samples, chains, chain, seed, on_done)
    }

    /// Greedy, one chain per sample: accuracy with its 95% interval, tool-call and
    /// parse-error rates, mean turns. Samples whose chain failed (not answered wrongly:
    /// failed) are rolled out again up to `eval.retries` times; if more than
    /// `eval.max_failures` of them still fail, the evaluation is an error.
    pub fn evaluate(&self, samples: &[Sample]) -> Result<EvalReport, TrainError> {
        self.evaluate_with(samples, |_| {})
    }

    /// [`Trainer::evaluate`], calling `on_done` as each trajectory finishes (progress).
    pub fn evaluate_with(
        &self,
        samples: &[Sample],
        mut on_done: impl FnMut(&Trajectory),
    ) -> Result<EvalReport, TrainError> {
        let chain = ChainConfig {
            temperature: 0.0,
            ..self.config.chain.clone()
        };
        let (mut trajectories, summary) = self.rollout(samples, 1, &chain, 0, &mut on_done)?;
        let mut wall = summary.wall_seconds;
        let limits = &self.config.eval;
        for _ in 0..limits.retries {
            let again: Vec<usize> = (0..trajectories.len())
                .filter(|&i| failed_of(&trajectories[i]))
                .collect();
            if again.is_empty() {
                break;
            }
            let redo: Vec<Sample> = again.iter().map(|&i| samples[i].clone()).collect();
            let (redone, summary) = self.rollout(&redo, 1, &chain, 0, |_| {})?;
            wall += summary.wall_seconds;
            for (i, t) in again.into_iter().zip(redone) {
                trajectories[i] = t;
            }
        }
        let summary = RolloutSummary::of(&trajectories, wall);
        let report = EvalReport::of(trajectories, summary);
        if report.failed as f64 > limits.max_failures * report.samples as f64 {
            return Err(TrainError::Evaluation {
                failed: report.failed,
                total: report.samples,
                retries: limits.retries,
                max: limits.max_failures,
                first: report.first_failure.clone().unwrap_or_default(),
            });
        }
        Ok(report)
    }

    /// Hands the actor's current weights to what generates (the engine, or the llama.cpp
    /// servers), as the policy of `version`: the number of RL updates behind them.
    pub(super) fn sync_policy(&self, version: u64) -> Result<(), TrainError> {
        self.chains.generator.push(
            self.actor.snapshot(),
            &self.model_config,
            self.actor.rope(),
            version,
        )
    }

    /// One line on the llama.cpp servers' work, when they generate.
    pub fn generator_summary(&self) -> Option<String> {
        self.chains.generator.summary()
    }

    /// The run's output directory, created.
    pub(super) fn output_dir(&self) -> Result<&Path, TrainError> {
        let dir = &self.config.output.dir;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(dir)
    }
}

impl Chains {
    pub(super) fn system_prompt(config: &TrainerConfig) -> Result<String, TrainError> {
        match &config.agent.system_prompt_file {
            Some(p) => std::fs::read_to_string(p).map_err(io(p)),
            None => Ok(config.agent.system_prompt.clone()),
        }
    }

    /// Rolls out `samples` × `chains` with the current policy; `on_done` sees each
    /// trajectory as it finishes (shaped, when `agent.format_bonus` is set).
    pub(super) fn rollout(
        &self,
        config: &TrainerConfig,
        samples: &[Sample],
        chains: usize,
        chain: &ChainConfig,
        seed: u64,
        mut on_done: impl FnMut(&Trajectory),
    ) -> Result<(Vec<Trajectory>, RolloutSummary), TrainError> {
        let system_prompt = Self::system_prompt(config)?;
        self.generator.revive()?;
        let chain = ChainConfig {
            system_prompt,
            ..chain.clone()
        };
        let rollout = Rollout {
            setup: ChainSetup {
                policy: self.generator.policy(),
                toolbox: &self.toolbox,
                format: self.format.as_ref(),
                template: &self.template,
                tokenizer: &self.tokenizer,
                end_of_turn: &self.eos,
                rewards: Some((&self.rewards, config.agent.reward.as_str())),
                config: &chain,
            },
            pools: self.pools.clone(),
            chains,
            concurrency: config.rollout.concurrency,
            seed,
        };
        let bonus = config.agent.format_bonus;
        if let Some(external) = &self.external {
            let start = std::time::Instant::now();
            let plan = super::external::Plan {
                samples,
                chains,
                chain: &chain,
                seed,
                concurrency: config.rollout.concurrency,
            };
            let trajectories =
                self.runtime
                    .block_on(external.rollout(self.generator.policy(), plan, |t| {
                        let mut t = t.clone();
                        shape(&mut t, bonus);
                        on_done(&t)
                    }));
            let mut trajectories = trajectories;
            trajectories.iter_mut().for_each(|t| shape(t, bonus));
            let summary = RolloutSummary::of(&trajectories, start.elapsed().as_secs_f64());
            return Ok((trajectories, summary));
        }
        let mut out = self.runtime.block_on(rollout.run(samples, |t| {
            let mut t = t.clone();
            shape(&mut t, bonus);
            on_done(&t)
        }));
        if let Some(t) = out.trajectories.iter().find(|t| {
            t.error
                .as_deref()
                .is_some_and(|e| e.contains("generation engine has stopped"))
        }) {
            return Err(TrainError::Engine(t.error.clone().unwrap_or_default()));
        }
        if bonus != 0.0 {
            out.trajectories.iter_mut().for_each(|t| shape(t, bonus));
            out.summary = RolloutSummary::of(&out.trajectories, out.summary.wall_seconds);
        }
        Ok((out.trajectories, out.summary))
    }
}
