//! The training loop: rollouts through the generation engine, advantages, the masked
//! policy update, new weights to the engine without touching disk, metrics to JSONL,
//! atomic checkpoints, and resuming where a run stopped.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In a binary that links its tool crates (agentfly_core::link!):
//! let mut trainer = agentfly_trainer::run::Trainer::from_config_file("train.toml")?;
//! let summary = trainer.train()?;
//! println!("{} steps, last reward {:?}", summary.steps, summary.last_reward);
//! # Ok(()) }
//! ```

pub mod checkpoint;
mod config;

pub use config::{
    AgentSection, AlgorithmSection, ConfigError, DataSection, ModelSection, OutputSection,
    RolloutSection, SftSection, TrainSection, TrainerConfig,
};

use crate::device::parse_device;
use crate::engine::Engine;
use crate::model::ModelConfig;
use crate::train::{PolicyRow, PolicyTrainer, StepReport};
use crate::{ModelError, Pretrained};
use agentfly_core::chat::{ChatTemplate, Tokenizer};
use agentfly_core::data::{DataError, read_jsonl};
use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::rl::{GroupFilter, Scored};
use agentfly_core::rollout::format::{ToolCallFormat, format_by_name};
use agentfly_core::rollout::{ChainConfig, ChainSetup, Rollout, RolloutSummary, Trajectory};
use agentfly_core::{RegistryError, Rewards, Sample, Toolbox};
use burn::module::Module;
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where in `output.dir` the policy after `[sft]` is written (Hugging Face layout); the
/// reference of a KL penalty after SFT, and the "after SFT" row of a report.
pub const SFT_MODEL: &str = "sft-model";

/// A run that cannot start or go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model cannot be loaded or saved.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A dataset cannot be read.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A tool or reward is not linked.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A file of the run cannot be written or read.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The engine stopped.
    #[error("generation engine: {0}")]
    Engine(String),
    /// The caller's `after_step` of [`Trainer::train_with`] failed.
    #[error("after step: {0}")]
    AfterStep(Box<dyn std::error::Error + Send + Sync>),
    /// A demonstration cannot be used for SFT.
    #[error("{path}: demonstration `{sample}`: {message}")]
    Demo {
        /// The file.
        path: PathBuf,
        /// The sample's id.
        sample: String,
        /// What is wrong.
        message: String,
    },
}

/// What the supervised warm start did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftReport {
    /// Demonstrations.
    pub demos: usize,
    /// Updates.
    pub updates: usize,
    /// Mean loss of the first epoch.
    pub first_epoch_loss: f32,
    /// Mean loss of the last epoch.
    pub last_epoch_loss: f32,
    /// Seconds.
    pub seconds: f64,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// One step's numbers, one line of `metrics.jsonl`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepMetrics {
    /// The step (1-based).
    pub step: usize,
    /// Trajectories rolled out this step (all rounds).
    pub trajectories: usize,
    /// Their mean reward.
    pub reward_mean: f64,
    /// Their mean `correct` metric, when the reward reports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Trajectories trained on (after dynamic sampling).
    pub trained_trajectories: usize,
    /// Groups dropped because their rewards were all equal.
    pub dropped_groups: usize,
    /// Rollout rounds.
    pub rounds: usize,
    /// Mean advantage over learned tokens.
    pub advantage_mean: f64,
    /// Mean |advantage| over learned tokens.
    pub advantage_abs_mean: f64,
    /// Tool calls.
    pub tool_calls: usize,
    /// Calls that could not be read.
    pub parse_errors: usize,
    /// Mean model turns.
    pub mean_turns: f64,
    /// Tokens the model sampled.
    pub sampled_tokens: usize,
    /// The update.
    #[serde(flatten)]
    pub update: StepReport,
    /// Seconds rolling out.
    pub rollout_seconds: f64,
    /// Seconds updating (log-probs, backward, AdamW).
    pub update_seconds: f64,
    /// Seconds handing the weights to the engine.
    pub sync_seconds: f64,
}

/// What a finished `train` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainSummary {
    /// Steps done in all (a resumed run counts the earlier ones).
    pub steps: usize,
    /// The step the run resumed from (0 for a fresh run).
    pub resumed_from: usize,
    /// The last step's mean reward.
    pub last_reward: Option<f64>,
    /// Where the final model was written.
    pub model_dir: PathBuf,
}

/// Accuracy on a set of samples, with its 95% (Wilson) interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Samples evaluated.
    pub samples: usize,
    /// Correct ones (reward metric `correct`, else reward > 0).
    pub correct: usize,
    /// `correct / samples`.
    pub accuracy: f64,
    /// The 95% Wilson score interval of the accuracy.
    pub interval: (f64, f64),
    /// Mean reward.
    pub reward_mean: f64,
    /// Share of trajectories with at least one tool call.
    pub tool_call_rate: f64,
    /// Unreadable calls per trajectory.
    pub parse_error_rate: f64,
    /// Mean turns.
    pub mean_turns: f64,
    /// The rollout's summary.
    pub summary: RolloutSummary,
    /// The trajectories (greedy, one per sample).
    #[serde(default)]
    pub trajectories: Vec<Trajectory>,
}

/// The 95% Wilson score interval of `k` successes in `n`.
pub fn wilson_interval(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    // At 0 or n successes a bound is exactly 0 or 1 (the formula leaves rounding noise).
    let low = if k == 0.0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if k == n {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (low, high)
}

/// A bar of `len` units named `unit`, with time left and a message.
fn progress_bar(len: u64, unit: &str) -> ProgressBar {
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:30}}] {unit} {{pos}}/{{len}} ({{eta}} left) {{msg}}"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    )
}

/// Adds `agent.format_bonus` to the reward of a chain that called tools, every call
/// well-formed and successful; the task's reward stays in the `task_reward` metric.
fn shape(t: &mut Trajectory, bonus: f32) {
    if bonus == 0.0 {
        return;
    }
    let Some(reward) = t.reward else { return };
    if t.reward_metrics.contains_key("task_reward") {
        return;
    }
    t.reward_metrics
        .insert("task_reward".into(), f64::from(reward));
    let clean = t.calls().next().is_some() && t.calls().all(|c| !c.is_error);
    if clean {
        t.reward = Some(reward + bonus);
    }
}

fn correct_of(t: &Trajectory) -> bool {
    match t.reward_metrics.get("correct") {
        Some(c) => *c > 0.5,
        None => match t.reward_metrics.get("task_reward") {
            Some(r) => *r > 0.0,
            None => t.reward.is_some_and(|r| r > 0.0),
        },
    }
}

/// A training run: the policy and its optimizer, the engine that samples from a copy of it,
/// the tools, the reward and the data.
pub struct Trainer {
    config: TrainerConfig,
    toolbox: Toolbox,
    rewards: Rewards,
    format: Box<dyn ToolCallFormat>,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    eos: Vec<u32>,
    model_config: ModelConfig,
    tokenizer_config: Option<Value>,
    policy: PolicyTrainer,
    engine: Engine,
    pools: EnvPools,
    runtime: tokio::runtime::Runtime,
    train: Vec<Sample>,
    eval: Vec<Sample>,
    step: usize,
    cursor: u64,
    sft_done: bool,
    resumed_from: usize,
    device: Device,
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
    /// Reads the TOML file and builds the run (resuming from its latest checkpoint).
    pub fn from_config_file(path: impl AsRef<Path>) -> Result<Self, TrainError> {
        Self::new(TrainerConfig::load(path)?)
    }

    /// Builds the run; when `output.dir` holds a checkpoint, continues from it.
    pub fn new(config: TrainerConfig) -> Result<Self, TrainError> {
        Self::build(config, true)
    }

    /// The run's setup with the policy loaded from `model` (a checkpoint directory, its
    /// `model/`, or any model path), not resumed: for evaluating a checkpoint.
    pub fn with_model(mut config: TrainerConfig, model: &Path) -> Result<Self, TrainError> {
        config.model.path = if model.join("model").join("config.json").exists() {
            model.join("model")
        } else {
            model.to_path_buf()
        };
        Self::build(config, false)
    }

    fn build(config: TrainerConfig, resume: bool) -> Result<Self, TrainError> {
        config.validate().map_err(|message| ConfigError {
            path: "<config>".into(),
            message,
        })?;
        let toolbox = Toolbox::from_names(&config.agent.tools)?;
        let rewards = Rewards::from_names(std::slice::from_ref(&config.agent.reward))?;
        let format = format_by_name(&config.agent.format).expect("validated");
        let train = read_jsonl(&config.data.train)?;
        let eval = match &config.data.eval {
            Some(p) => read_jsonl(p)?,
            None => Vec::new(),
        };
        let device = parse_device(&config.model.device).map_err(|message| ConfigError {
            path: "<config>".into(),
            message: format!("model.device: {message}"),
        })?;
        let root = config.output.dir.join("checkpoints");
        let resume = if resume {
            checkpoint::latest(&root)
        } else {
            None
        };
        let saved = match &resume {
            Some(dir) => {
                let state_path = dir.join("state.json");
                let text = std::fs::read_to_string(&state_path).map_err(io(&state_path))?;
                let saved: checkpoint::RunState =
                    serde_json::from_str(&text).map_err(|e| TrainError::Io {
                        path: state_path.clone(),
                        message: e.to_string(),
                    })?;
                Some(saved)
            }
            None => None,
        };
        let source = match &resume {
            Some(dir) => dir.join("model"),
            None => config.model.path.clone(),
        };
        // Loaded once, on the autodiff device; the engine serves a copy without autodiff,
        // as it does after every update.
        let trained = Pretrained::load(&source, &device.clone().autodiff())?;
        let serving = Pretrained {
            config: trained.config.clone(),
            decoder: trained.decoder.valid(),
            rope: crate::model::Rope::for_config(&trained.config, &device),
            tokenizer: trained.tokenizer.clone(),
            tokenizer_config: trained.tokenizer_config.clone(),
            source: source.clone(),
        };
        let reference = if config.train.loss.kl_coef != 0.0
            || config.algorithm.estimator.needs_kl()
            || config.train.track_kl
        {
            // The reference is the starting model, or the model after `[sft]`: a resumed
            // run reads it again.
            let sft_model = config.output.dir.join(SFT_MODEL);
            Some(match &saved {
                Some(s) if s.sft_done && sft_model.join("config.json").exists() => {
                    Pretrained::load(&sft_model, &device)?.decoder
                }
                Some(_) => Pretrained::load(&config.model.path, &device)?.decoder,
                None => trained.decoder.valid(),
            })
        } else {
            None
        };
        let (tokenizer, template, eos) = serving.chat_parts()?;
        let model_config = serving.config.clone();
        let tokenizer_config = serving.tokenizer_config.clone();
        let engine = Engine::start(serving, config.rollout.engine.clone());
        let mut decoder = trained.decoder;
        let mut state = None;
        if let (Some(dir), Some(saved)) = (&resume, saved) {
            // The optimizer's state is keyed by parameter ids: give them back.
            decoder = checkpoint::with_param_ids(decoder, &saved.param_ids);
            state = Some((dir.join("optimizer.bpk"), saved));
        }
        let mut policy = PolicyTrainer::new(
            decoder,
            trained.rope,
            reference,
            config.optim.clone(),
            config.train.steps,
        );
        if config.algorithm.estimator.needs_values() {
            let head = crate::train::ValueHead::new(
                trained.config.hidden_size,
                &device.clone().autodiff(),
            );
            policy.set_critic(head, None);
        }
        let (mut step, mut cursor, mut resumed_from, mut sft_done) = (0, 0, 0, false);
        if let Some((optim_path, saved)) = state {
            let optim = config
                .optim
                .init()
                .load(&optim_path)
                .map_err(|e| TrainError::Io {
                    path: optim_path.clone(),
                    message: format!("{e:?}"),
                })?;
            policy.set_optimizer(optim);
            if let Some(dir) = optim_path.parent()
                && config.algorithm.estimator.needs_values()
            {
                let (head, optim) =
                    checkpoint::load_critic(dir, &config.optim, &device.clone().autodiff())
                        .map_err(|message| TrainError::Io {
                            path: dir.join("critic.json"),
                            message,
                        })?;
                policy.set_critic(head, Some(optim));
            }
            policy.step = saved.step;
            (step, cursor, resumed_from, sft_done) =
                (saved.step, saved.cursor, saved.step, saved.sft_done);
        }
        let pools = EnvPools::new(PoolConfig {
            capacity: config.rollout.env_capacity.max(1),
            ..PoolConfig::default()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(io(Path::new("<tokio runtime>")))?;
        Ok(Self {
            config,
            toolbox,
            rewards,
            format,
            tokenizer,
            template,
            eos,
            model_config,
            tokenizer_config,
            policy,
            engine,
            pools,
            runtime,
            train,
            eval,
            step,
            cursor,
            sft_done,
            resumed_from,
            device,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.step
    }

    /// The policy being trained.
    pub fn policy(&self) -> &PolicyTrainer {
        &self.policy
    }

    /// The held-out samples of `data.eval`.
    pub fn eval_samples(&self) -> &[Sample] {
        &self.eval
    }

    fn system_prompt(&self) -> Result<String, TrainError> {
        match &self.config.agent.system_prompt_file {
            Some(p) => std::fs::read_to_string(p).map_err(io(p)),
            None => Ok(self.config.agent.system_prompt.clone()),
        }
    }

    /// The next `n` training samples: the set shuffled anew (by seed) every pass.
    fn draw(&mut self, n: usize) -> Vec<Sample> {
        let len = self.train.len() as u64;
        (0..n)
            .map(|_| {
                let pass = self.cursor / len;
                let mut order: Vec<usize> = (0..self.train.len()).collect();
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                    self.config.train.seed ^ pass.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                order.shuffle(&mut rng);
                let sample = self.train[order[(self.cursor % len) as usize]].clone();
                self.cursor += 1;
                sample
            })
            .collect()
    }

    /// Rolls out `samples` × `chains` with the current policy.
    pub fn rollout(
        &self,
        samples: &[Sample],
        chains: usize,
        chain: &ChainConfig,
        seed: u64,
        mut on_done: impl FnMut(&Trajectory),
    ) -> Result<(Vec<Trajectory>, RolloutSummary), TrainError> {
        let system_prompt = self.system_prompt()?;
        let config = ChainConfig {
            system_prompt,
            ..chain.clone()
        };
        let rollout = Rollout {
            setup: ChainSetup {
                policy: &self.engine,
                toolbox: &self.toolbox,
                format: self.format.as_ref(),
                template: &self.template,
                tokenizer: &self.tokenizer,
                end_of_turn: &self.eos,
                rewards: Some((&self.rewards, self.config.agent.reward.as_str())),
                config: &config,
            },
            pools: self.pools.clone(),
            chains,
            concurrency: self.config.rollout.concurrency,
            seed,
        };
        let bonus = self.config.agent.format_bonus;
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

    /// Greedy, one chain per sample: accuracy with its 95% interval, tool-call and
    /// parse-error rates, mean turns.
    pub fn evaluate(&self, samples: &[Sample]) -> Result<EvalReport, TrainError> {
        self.evaluate_with(samples, |_| {})
    }

    /// [`Trainer::evaluate`], calling `on_done` as each trajectory finishes (progress).
    pub fn evaluate_with(
        &self,
        samples: &[Sample],
        on_done: impl FnMut(&Trajectory),
    ) -> Result<EvalReport, TrainError> {
        let chain = ChainConfig {
            temperature: 0.0,
            ..self.config.chain.clone()
        };
        let (trajectories, summary) = self.rollout(samples, 1, &chain, 0, on_done)?;
        let n = trajectories.len();
        let correct = trajectories.iter().filter(|t| correct_of(t)).count();
        let with_calls = trajectories
            .iter()
            .filter(|t| t.calls().next().is_some())
            .count();
        let rate = |x: usize| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        Ok(EvalReport {
            samples: n,
            correct,
            accuracy: rate(correct),
            interval: wilson_interval(correct, n),
            reward_mean: summary.reward_mean.unwrap_or(0.0),
            tool_call_rate: rate(with_calls),
            parse_error_rate: rate(summary.parse_errors),
            mean_turns: summary.mean_turns,
            summary,
            trajectories,
        })
    }

    /// One step: roll out (with dynamic sampling), compute advantages, update the policy,
    /// hand the new weights to the engine.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        let start = Instant::now();
        let rollout_config = self.config.rollout.clone();
        let target = rollout_config.samples_per_step;
        let dynamic = rollout_config.dynamic_sampling;
        let mut filter = GroupFilter::new(target);
        let mut all = Vec::new();
        let mut rounds = 0;
        let chain = self.config.chain.clone();
        for _ in 0..if dynamic {
            rollout_config.max_rounds.max(1)
        } else {
            1
        } {
            rounds += 1;
            let need = if dynamic {
                target - filter.kept_groups()
            } else {
                target
            };
            let seed = self.config.train.seed ^ self.cursor.wrapping_mul(0xA24B_AED4_963E_E407);
            let samples = self.draw(need);
            let (trajectories, _) =
                self.rollout(&samples, rollout_config.chains, &chain, seed, |_| {})?;
            all.extend(trajectories.iter().cloned());
            if dynamic {
                filter.add(trajectories);
                if filter.is_full() {
                    break;
                }
            }
        }
        let (trained, dropped) = if dynamic {
            let dropped = filter.dropped_groups();
            (filter.into_trajectories(), dropped)
        } else {
            (all.clone(), 0)
        };
        let rollout_seconds = start.elapsed().as_secs_f64();
        let summary = RolloutSummary::of(&all, rollout_seconds);
        let accuracy = all
            .iter()
            .any(|t| t.reward_metrics.contains_key("correct"))
            .then(|| all.iter().filter(|t| correct_of(t)).count() as f64 / all.len().max(1) as f64);
        let mut metrics = StepMetrics {
            step: self.step + 1,
            trajectories: all.len(),
            reward_mean: summary.reward_mean.unwrap_or(0.0),
            accuracy,
            trained_trajectories: trained.len(),
            dropped_groups: dropped,
            rounds,
            tool_calls: summary.calls(),
            parse_errors: summary.parse_errors,
            mean_turns: summary.mean_turns,
            sampled_tokens: summary.sampled_tokens,
            rollout_seconds,
            ..StepMetrics::default()
        };
        let rows = self.rows(&trained);
        let update_start = Instant::now();
        if rows.is_empty() {
            metrics.update.skipped =
                Some("no group had differing rewards: nothing to learn from".into());
        } else {
            let learned: Vec<f32> = rows
                .iter()
                .flat_map(|r| {
                    r.mask
                        .iter()
                        .zip(&r.advantages)
                        .filter(|(m, _)| **m > 0.0)
                        .map(|(_, a)| *a)
                })
                .collect();
            if !learned.is_empty() {
                let n = learned.len() as f64;
                metrics.advantage_mean = learned.iter().map(|&a| f64::from(a)).sum::<f64>() / n;
                metrics.advantage_abs_mean =
                    learned.iter().map(|&a| f64::from(a.abs())).sum::<f64>() / n;
            }
            metrics.update = self.policy.update(&rows, &self.config.train.step_config());
        }
        metrics.update_seconds = update_start.elapsed().as_secs_f64();
        let sync_start = Instant::now();
        if metrics.update.updates > 0 {
            let decoder = self.policy.snapshot();
            self.engine
                .with_model(move |model| model.decoder = decoder)
                .map_err(|e| TrainError::Engine(e.to_string()))?;
        }
        metrics.sync_seconds = sync_start.elapsed().as_secs_f64();
        self.step += 1;
        Ok(metrics)
    }

    /// The rows to learn from: the effective mask (sampled tokens, or everything after
    /// the prompt when `algorithm.mask` is off) and per-token advantages.
    fn rows(&self, trajectories: &[Trajectory]) -> Vec<PolicyRow> {
        let usable: Vec<&Trajectory> = trajectories
            .iter()
            .filter(|t| t.tokens.len() >= 2 && t.sampled_tokens() > 0)
            .collect();
        let masks: Vec<Vec<u8>> = usable
            .iter()
            .map(|t| {
                if self.config.algorithm.mask {
                    t.loss_mask.clone()
                } else {
                    (0..t.tokens.len())
                        .map(|i| u8::from(i >= t.prompt_len))
                        .collect()
                }
            })
            .collect();
        let items: Vec<Scored<'_>> = usable
            .iter()
            .zip(&masks)
            .map(|(t, m)| Scored {
                group: &t.sample_id,
                reward: t.reward.unwrap_or(0.0),
                mask: m,
            })
            .collect();
        let estimator = &self.config.algorithm.estimator;
        let budget = self.config.train.micro_batch_tokens;
        let kl = if estimator.needs_kl() {
            let tokens: Vec<&[u32]> = usable.iter().map(|t| t.tokens.as_slice()).collect();
            self.policy.kl_to_reference(&tokens, budget)
        } else {
            None
        };
        let mut rows: Vec<PolicyRow> = usable
            .iter()
            .zip(&masks)
            .map(|(t, m)| PolicyRow {
                tokens: t.tokens.clone(),
                mask: m.iter().map(|&x| f32::from(x)).collect(),
                advantages: Vec::new(),
                returns: Vec::new(),
                old_values: Vec::new(),
            })
            .collect();
        let values = if estimator.needs_values() {
            self.policy.values(&rows, budget)
        } else {
            None
        };
        let Ok(computed) = estimator.compute(&items, kl.as_deref(), values.as_deref()) else {
            return Vec::new();
        };
        for (k, row) in rows.iter_mut().enumerate() {
            row.advantages = computed.advantages[k].clone();
            if let (Some(values), Some(returns)) = (&values, computed.returns.get(k)) {
                row.returns = returns.clone();
                row.old_values = values[k].clone();
            }
        }
        rows
    }

    /// The supervised warm start of `[sft]`, once per run (a checkpoint records it; an
    /// interrupted SFT starts over). Lines of `output.dir/sft_metrics.jsonl` per update;
    /// the model after SFT in `output.dir/sft-model`, which also becomes the reference of
    /// the KL to the reference.
    pub fn sft(&mut self) -> Result<Option<SftReport>, TrainError> {
        let Some(sft) = self.config.sft.clone() else {
            return Ok(None);
        };
        if self.sft_done {
            return Ok(None);
        }
        let start = Instant::now();
        let demos = read_jsonl(&sft.data)?;
        let system = self.system_prompt()?;
        let tools = (!self.toolbox.is_empty()).then(|| self.toolbox.schemas());
        let mut rows = Vec::with_capacity(demos.len());
        for demo in &demos {
            let bad = |message: String| TrainError::Demo {
                path: sft.data.clone(),
                sample: demo.id.clone(),
                message,
            };
            let messages = agentfly_core::rollout::sample_messages(demo, &system).map_err(bad)?;
            let (tokens, mask) = agentfly_core::rollout::demonstration(
                &self.template,
                &self.tokenizer,
                &messages,
                tools.clone(),
                self.eos[0],
            )
            .map_err(|e| bad(e.to_string()))?;
            let n = tokens.len();
            rows.push(PolicyRow {
                tokens,
                mask: mask.into_iter().map(f32::from).collect(),
                advantages: vec![0.0; n],
                returns: Vec::new(),
                old_values: Vec::new(),
            });
        }
        let mut optim = crate::train::OptimConfig {
            lr: sft.lr,
            warmup_steps: 0,
            schedule: crate::train::Schedule::Constant,
            ..self.config.optim.clone()
        }
        .init();
        let dir = self.config.output.dir.clone();
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join("sft_metrics.jsonl");
        let mut log = std::fs::File::create(&path).map_err(io(&path))?;
        let (mut updates, mut first, mut last) = (0, 0.0f32, 0.0f32);
        let batches_per_epoch = rows.len().div_ceil(sft.batch_size.max(1));
        let bar = progress_bar((sft.epochs * batches_per_epoch) as u64, "sft batch");
        for epoch in 0..sft.epochs {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                self.config.train.seed ^ (epoch as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D),
            );
            order.shuffle(&mut rng);
            let (mut total, mut batches) = (0.0f32, 0);
            for (b, chunk) in order.chunks(sft.batch_size).enumerate() {
                let batch: Vec<PolicyRow> = chunk.iter().map(|&i| rows[i].clone()).collect();
                let report =
                    self.policy
                        .sft_update(&batch, sft.micro_batch_tokens, &mut optim, sft.lr);
                updates += report.updates;
                total += report.loss;
                batches += 1;
                let line = serde_json::json!({
                    "epoch": epoch + 1, "batch": b + 1, "loss": report.loss,
                    "grad_norm": report.grad_norm, "tokens": report.tokens,
                    "skipped": report.skipped,
                });
                writeln!(log, "{line}").map_err(io(&path))?;
                bar.set_message(format!("loss {:.4}", report.loss));
                bar.inc(1);
            }
            let mean = total / batches.max(1) as f32;
            if epoch == 0 {
                first = mean;
            }
            last = mean;
        }
        bar.finish_and_clear();
        let decoder = self.policy.snapshot();
        if self.policy.reference().is_some() {
            // RL's KL is to the warm-started policy, not to the model before SFT.
            self.policy.set_reference(Some(decoder.clone()));
        }
        self.engine
            .with_model(move |model| model.decoder = decoder)
            .map_err(|e| TrainError::Engine(e.to_string()))?;
        self.save_model(&dir.join(SFT_MODEL))?;
        self.sft_done = true;
        self.save_checkpoint()?;
        Ok(Some(SftReport {
            demos: rows.len(),
            updates,
            first_epoch_loss: first,
            last_epoch_loss: last,
            seconds: start.elapsed().as_secs_f64(),
        }))
    }

    /// Runs the remaining steps: metrics to `output.dir/metrics.jsonl`, a progress line,
    /// checkpoints every `checkpoint_every` steps and at the end, the final model in
    /// `output.dir/model`.
    pub fn train(&mut self) -> Result<TrainSummary, TrainError> {
        self.train_with(|_, _, _| Ok(()))
    }

    /// [`Trainer::train`], calling `after_step` after each step's metrics and checkpoint
    /// are written (e.g. to evaluate on the validation split); it may set the progress
    /// bar's message.
    pub fn train_with(
        &mut self,
        mut after_step: impl FnMut(
            &Self,
            &StepMetrics,
            &ProgressBar,
        ) -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
    ) -> Result<TrainSummary, TrainError> {
        let dir = self.config.output.dir.clone();
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        if let Some(report) = self.sft()? {
            eprintln!(
                "sft: {} demonstrations, {} updates, loss {:.4} -> {:.4} ({:.1}s)",
                report.demos,
                report.updates,
                report.first_epoch_loss,
                report.last_epoch_loss,
                report.seconds
            );
        }
        let metrics_path = dir.join("metrics.jsonl");
        self.trim_metrics(&metrics_path)?;
        let total = self.config.train.steps;
        let bar = progress_bar(total as u64, "step");
        bar.set_position(self.step as u64);
        let mut last_reward = None;
        while self.step < total {
            let m = self.train_step()?;
            last_reward = Some(m.reward_mean);
            let line = serde_json::to_string(&m).expect("metrics serialize");
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&metrics_path)
                .map_err(io(&metrics_path))?;
            writeln!(file, "{line}").map_err(io(&metrics_path))?;
            let text = format!(
                "step {} reward {:.3}{} kl {:.4} clip {:.3} grad {:.3} dropped {} {:.1}s{}",
                m.step,
                m.reward_mean,
                m.accuracy
                    .map(|a| format!(" acc {a:.3}"))
                    .unwrap_or_default(),
                m.update.kl,
                m.update.clip_fraction,
                m.update.grad_norm,
                m.dropped_groups,
                m.rollout_seconds + m.update_seconds + m.sync_seconds,
                m.update
                    .skipped
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default(),
            );
            if bar.is_hidden() {
                eprintln!("{text}");
            } else {
                bar.println(&text);
            }
            bar.set_message(format!("reward {:.3}", m.reward_mean));
            bar.set_position(self.step as u64);
            let every = self.config.output.checkpoint_every.max(1);
            if self.step.is_multiple_of(every) || self.step == total {
                self.save_checkpoint()?;
            }
            after_step(self, &m, &bar).map_err(TrainError::AfterStep)?;
        }
        bar.finish_and_clear();
        let model_dir = dir.join("model");
        self.save_model(&model_dir)?;
        Ok(TrainSummary {
            steps: self.step,
            resumed_from: self.resumed_from,
            last_reward,
            model_dir,
        })
    }

    /// Drops metric lines past the step the run resumed from (they will be redone).
    fn trim_metrics(&self, path: &Path) -> Result<(), TrainError> {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Ok(());
        };
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| v["step"].as_u64())
                    .is_some_and(|s| s as usize <= self.step)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        checkpoint::write_atomic(path, &kept).map_err(io(path))
    }

    /// The policy as a loadable model (weights without autodiff).
    fn pretrained(&self) -> Pretrained {
        Pretrained {
            config: self.model_config.clone(),
            decoder: self.policy.snapshot(),
            rope: crate::model::Rope::for_config(&self.model_config, &self.device),
            tokenizer: Some(self.tokenizer.clone()),
            tokenizer_config: self.tokenizer_config.clone(),
            source: self.config.model.path.clone(),
        }
    }

    /// Writes the policy in Hugging Face layout (transformers loads it), atomically.
    pub fn save_model(&self, dir: &Path) -> Result<(), TrainError> {
        let model = self.pretrained();
        let mut failure = None;
        checkpoint::replace_dir(dir, |tmp| {
            model.save(tmp).map_err(|e| {
                failure = Some(TrainError::Model(e));
                std::io::Error::other("model")
            })
        })
        .map_err(|e| failure.take().unwrap_or_else(|| io(dir)(e)))
    }

    /// Writes a checkpoint of this step (policy, optimizer, position) atomically.
    pub fn save_checkpoint(&self) -> Result<PathBuf, TrainError> {
        let root = self.config.output.dir.join("checkpoints");
        let final_dir = checkpoint::step_dir(&root, self.step);
        let state = checkpoint::RunState {
            step: self.step,
            cursor: self.cursor,
            sft_done: self.sft_done,
            param_ids: checkpoint::param_ids(self.policy.decoder()),
        };
        let model = self.pretrained();
        let mut failure = None;
        checkpoint::commit(
            &root,
            &final_dir,
            self.config.output.keep_checkpoints,
            |tmp| {
                if let Err(e) = model.save(&tmp.join("model")) {
                    failure = Some(TrainError::Model(e));
                    return Err(std::io::Error::other("model"));
                }
                self.policy
                    .optimizer()
                    .save(tmp.join("optimizer.bpk"))
                    .map_err(|e| std::io::Error::other(format!("optimizer state: {e:?}")))?;
                if let Some((head, optim)) = self.policy.critic() {
                    checkpoint::save_critic(tmp, head, optim).map_err(std::io::Error::other)?;
                }
                let config = toml::to_string(&self.config).map_err(std::io::Error::other)?;
                std::fs::write(tmp.join("config.toml"), config)?;
                std::fs::write(
                    tmp.join("state.json"),
                    serde_json::to_string_pretty(&state).expect("state serializes"),
                )
            },
        )
        .map_err(|e| failure.take().unwrap_or_else(|| io(&root)(e)))?;
        Ok(final_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::{correct_of, shape, wilson_interval};
    use agentfly_core::rollout::{CallRecord, Trajectory, Turn};

    fn chain(reward: f32, calls: &[bool]) -> Trajectory {
        Trajectory {
            reward: Some(reward),
            turns: vec![Turn {
                calls: calls
                    .iter()
                    .map(|&is_error| CallRecord {
                        name: "calculator".into(),
                        is_error,
                        ..CallRecord::default()
                    })
                    .collect(),
                ..Turn::default()
            }],
            ..Trajectory::default()
        }
    }

    #[test]
    fn the_format_bonus_goes_to_clean_tool_use_and_accuracy_ignores_it() {
        // Clean calls: bonus; the task's reward is kept, and a wrong answer stays wrong.
        let mut t = chain(0.0, &[false, false]);
        shape(&mut t, 0.1);
        assert_eq!(t.reward, Some(0.1));
        assert_eq!(t.reward_metrics["task_reward"], 0.0);
        assert!(!correct_of(&t));
        // Shaping twice adds nothing.
        shape(&mut t, 0.1);
        assert_eq!(t.reward, Some(0.1));
        // A failed call, or no call: no bonus.
        for calls in [&[false, true][..], &[]] {
            let mut t = chain(1.0, calls);
            shape(&mut t, 0.1);
            assert_eq!(t.reward, Some(1.0), "{calls:?}");
            assert!(correct_of(&t));
        }
        // Off: untouched.
        let mut t = chain(1.0, &[false]);
        shape(&mut t, 0.0);
        assert_eq!((t.reward, t.reward_metrics.len()), (Some(1.0), 0));
    }

    #[test]
    fn wilson_intervals_match_the_formula() {
        let close = |(a, b): (f64, f64), (c, d): (f64, f64)| {
            assert!(
                (a - c).abs() < 1e-9 && (b - d).abs() < 1e-9,
                "{a} {b} vs {c} {d}"
            );
        };
        close(
            wilson_interval(6, 48),
            (0.058_570_514_385_719_79, 0.247_004_582_863_868_34),
        );
        close(
            wilson_interval(28, 48),
            (0.442_813_322_839_762_8, 0.711_503_322_215_884_4),
        );
        close(wilson_interval(0, 48), (0.0, 0.074_100_129_667_617_48));
        close(wilson_interval(48, 48), (0.925_899_870_333_882_4, 1.0));
        assert_eq!(wilson_interval(0, 0), (0.0, 1.0));
    }
}
