//! The training run's TOML configuration. Errors name the file and the key.

use super::external_config::ExternalAgentConfig;
use crate::train::{OptimConfig, TrainSection};
use agentfly_core::rl::Estimator;
use agentfly_core::rollout::ChainConfig;
use agentfly_engine::engine::EngineConfig;
use agentfly_engine::server::{ExternalServersConfig, LlamaServerConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A whole run: `agentfly train --config FILE.toml`.
///
/// ```toml
/// [model]
/// path = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
///
/// [data]
/// train = "data/train.jsonl"
/// eval = "data/test.jsonl"
///
/// [agent]
/// tools = ["calculator", "submit_answer"]
/// reward = "exact_numeric"
/// system_prompt_file = "system.txt"
///
/// [rollout]
/// chains = 4
/// samples_per_step = 6
///
/// [algorithm]
/// estimator = { name = "grpo" }
///
/// [train]
/// steps = 20
///
/// [optim]
/// lr = 2e-5
///
/// [output]
/// dir = "runs/calculator"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainerConfig {
    /// The policy to start from.
    pub model: ModelSection,
    /// The datasets.
    pub data: DataSection,
    /// Tools, reward, format and system prompt.
    pub agent: AgentSection,
    /// Turn and token budgets, sampling.
    #[serde(default)]
    pub chain: ChainConfig,
    /// Rollouts per step.
    #[serde(default)]
    pub rollout: RolloutSection,
    /// Advantages and masking.
    #[serde(default)]
    pub algorithm: AlgorithmSection,
    /// The update.
    #[serde(default)]
    pub train: TrainSection,
    /// The optimizer.
    #[serde(default)]
    pub optim: OptimConfig,
    /// A supervised warm start on demonstrations, before RL.
    #[serde(default)]
    pub sft: Option<SftSection>,
    /// Train low-rank adapters instead of every weight (SFT and RL alike).
    #[serde(default)]
    pub lora: Option<agentfly_model::model::LoraConfig>,
    /// Where checkpoints, metrics and the final model go.
    pub output: OutputSection,
    /// What a held-out evaluation tolerates.
    #[serde(default)]
    pub eval: super::eval::EvalSection,
}

/// `[sft]`: supervised fine-tuning on demonstrations (JSONL samples whose `messages` hold
/// whole conversations with assistant turns and tool results), run once before RL. The
/// loss applies to the assistant's tokens only, tokenized exactly as rollouts tokenize.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSection {
    /// The demonstrations.
    pub data: PathBuf,
    /// Passes over them.
    #[serde(default = "one")]
    pub epochs: usize,
    /// Demonstrations per update.
    #[serde(default = "eight")]
    pub batch_size: usize,
    /// Learning rate (constant; SFT has its own AdamW).
    #[serde(default = "sft_lr")]
    pub lr: f64,
    /// Padded positions per micro-batch.
    #[serde(default = "sft_tokens")]
    pub micro_batch_tokens: usize,
}

impl SftSection {
    /// SFT on `data` with the defaults: one epoch, batches of 8, lr 1e-5.
    pub fn new(data: PathBuf) -> Self {
        Self {
            data,
            epochs: one(),
            batch_size: eight(),
            lr: sft_lr(),
            micro_batch_tokens: sft_tokens(),
        }
    }
}

fn one() -> usize {
    1
}

fn eight() -> usize {
    8
}

fn sft_lr() -> f64 {
    1e-5
}

fn sft_tokens() -> usize {
    4096
}

/// `[model]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A Hugging Face directory or a GGUF file.
    pub path: PathBuf,
    /// `cpu`, `wgpu` or `cuda[:N]`.
    #[serde(default = "cpu")]
    pub device: String,
    /// Matrix products of many rows (prefill, training, scoring) in bf16 with f32 sums on
    /// Intel AMX (`Decoder::use_bf16_products`); an error where the CPU has none or the
    /// device is not the CPU. Weights loaded from `path` are dithered within their bf16
    /// cells first (`Decoder::dither_for_bf16`); the master weights stay f32.
    /// Experimental: off by default.
    #[serde(default)]
    pub bf16: bool,
}

fn cpu() -> String {
    "cpu".into()
}

/// `[data]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Training samples (JSONL).
    pub train: PathBuf,
    /// Held-out samples for evaluation (JSONL).
    #[serde(default)]
    pub eval: Option<PathBuf>,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// Tool names (linked into the binary); none: the model answers in plain text and the
    /// reward reads its reply (a no-tool baseline).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The reward's name (none with `[rollout.external]`: the agent posts its reward).
    #[serde(default)]
    pub reward: String,
    /// `hermes`, `react` or `code`.
    #[serde(default = "hermes")]
    pub format: String,
    /// The system prompt (or `system_prompt_file`).
    #[serde(default)]
    pub system_prompt: String,
    /// A file holding the system prompt.
    #[serde(default)]
    pub system_prompt_file: Option<PathBuf>,
    /// Reward shaping, off by default: added to the reward of a chain that made at least
    /// one tool call and whose every call was well-formed and succeeded. Task accuracy
    /// (the reward's `correct` metric) is reported apart from the shaped reward, and the
    /// unshaped reward is kept in the `task_reward` metric.
    #[serde(default)]
    pub format_bonus: f32,
    /// Files the tools read, by name, relative ones against this file's directory:
    /// `wiki_corpus`, the encyclopedia of `search` and `retrieve`. A run whose tools cannot
    /// work without theirs stops at its start.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, PathBuf>,
    /// MCP servers whose tools join `tools` (`[[agent.mcp]]`): every tool a server lists,
    /// or those its `tools` names. A name clash with a registered tool is refused at start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<agentfly_mcp::McpServerConfig>,
}

fn hermes() -> String {
    "hermes".into()
}

/// `[rollout]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutSection {
    /// Chains per sample (the group).
    pub chains: usize,
    /// Groups per update.
    pub samples_per_step: usize,
    /// The most chains running at once.
    pub concurrency: usize,
    /// Drop groups whose rewards are all equal, and roll out more samples to fill the
    /// batch (DAPO / L0).
    pub dynamic_sampling: bool,
    /// The most rollout rounds per step when dynamic sampling drops groups.
    pub max_rounds: usize,
    /// The most instances of each environment.
    pub env_capacity: usize,
    /// Roll the next step's batch out while this step's update runs: one update stale,
    /// corrected by `train.behaviour_weight_cap`'s importance weights (verl's and AReaL's
    /// one-step-off-policy mode). Off: each step rolls out with the weights it updates.
    pub overlap: bool,
    /// The generation engine.
    pub engine: EngineConfig,
    /// Roll out on llama.cpp servers instead of the engine (`[rollout.llama_server]`): the
    /// trainer starts them and pushes each update's weights to them.
    pub llama_server: Option<LlamaServerConfig>,
    /// Or roll out on running vLLM or SGLang servers (`[rollout.servers]`): the trainer
    /// writes each update's weights where they can read them and has them load it.
    pub servers: Option<ExternalServersConfig>,
    /// Or let an agent program play each episode against the trainer's own
    /// OpenAI-compatible endpoint (`[rollout.external]`); it posts the reward.
    pub external: Option<ExternalAgentConfig>,
}

impl Default for RolloutSection {
    fn default() -> Self {
        Self {
            chains: 4,
            samples_per_step: 8,
            concurrency: 64,
            dynamic_sampling: true,
            max_rounds: 4,
            env_capacity: 8,
            overlap: false,
            engine: EngineConfig::default(),
            llama_server: None,
            servers: None,
            external: None,
        }
    }
}

/// `[algorithm]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlgorithmSection {
    /// How advantages are computed.
    pub estimator: Estimator,
    /// Apply the loss only to the tokens the model sampled (false: to every token after
    /// the prompt, observations included — the ablation).
    pub mask: bool,
    /// The shape of a training row: a whole trajectory with its mask, or one row per turn.
    #[serde(default, skip_serializing_if = "RowShape::is_trajectory")]
    pub rows: RowShape,
}

/// The shape of the rows an RL update learns from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowShape {
    /// One row per trajectory: every turn's sampled tokens learn in one sequence
    /// (AgentFly, verl).
    #[default]
    Trajectory,
    /// One row per turn (L0's step-level samples): the turn's context, then its sampled
    /// tokens and what the environment appended, learning only on that turn's tokens,
    /// with the trajectory's advantages. The same tokens learn once each; under
    /// `loss.aggregation = "token-mean"` the loss is the trajectory rows' (a prefix's
    /// log-probs do not depend on what follows), under a per-sequence mean every turn
    /// weighs as much as a whole trajectory. Each row recomputes its context.
    Turns,
}

impl RowShape {
    /// Is it the default?
    pub fn is_trajectory(&self) -> bool {
        *self == Self::Trajectory
    }
}

impl Default for AlgorithmSection {
    fn default() -> Self {
        Self {
            estimator: Estimator::default(),
            mask: true,
            rows: RowShape::Trajectory,
        }
    }
}

/// `[output]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    /// The run's directory: `metrics.jsonl`, `checkpoints/`, `model/`.
    pub dir: PathBuf,
    /// Write a checkpoint every this many steps (and at the end).
    #[serde(default = "five")]
    pub checkpoint_every: usize,
    /// Keep this many latest checkpoints.
    #[serde(default = "two")]
    pub keep_checkpoints: usize,
    /// Write TensorBoard event files under `dir/tensorboard/` (each step's numbers, the
    /// distributions of rewards and advantages, sample trajectories, SFT's losses and the
    /// jobs' validation accuracy).
    #[serde(default = "yes")]
    pub tensorboard: bool,
}

impl OutputSection {
    /// Output into `dir` with the defaults: a checkpoint every 5 steps, the latest 2 kept,
    /// TensorBoard's event files written.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            checkpoint_every: five(),
            keep_checkpoints: two(),
            tensorboard: yes(),
        }
    }
}

fn yes() -> bool {
    true
}

fn five() -> usize {
    5
}

fn two() -> usize {
    2
}

/// A configuration that cannot be used; names the file and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// The file (or `<config>` for one built in code).
    pub path: PathBuf,
    /// What is wrong, starting with the key.
    pub message: String,
}

impl TrainerConfig {
    /// Makes the relative paths relative to `base`.
    pub fn resolve(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.model.path);
        fix(&mut self.data.train);
        if let Some(p) = &mut self.data.eval {
            fix(p);
        }
        if let Some(p) = &mut self.agent.system_prompt_file {
            fix(p);
        }
        self.agent.resources.values_mut().for_each(fix);
        fix(&mut self.output.dir);
        if let Some(sft) = &mut self.sft {
            fix(&mut sft.data);
        }
        // Absolute: the server starts in another directory (its session's, or `cwd`).
        let absolute = |p: &Path| {
            let joined = base.join(p);
            std::path::absolute(&joined).unwrap_or(joined)
        };
        for server in &mut self.agent.mcp {
            if let Some(cwd) = &mut server.cwd {
                *cwd = absolute(cwd);
            }
            // A program named by a relative path (`../venv/bin/server`), not one found on
            // PATH (`npx`).
            if let Some(command) = &mut server.command
                && command.contains('/')
                && Path::new(command.as_str()).is_relative()
            {
                *command = absolute(Path::new(command)).to_string_lossy().into_owned();
            }
        }
        if let Some(external) = &mut self.rollout.external {
            external.resolve(base);
        }
        if let Some(dir) = self.rollout.servers.as_mut().and_then(|s| s.dir.as_mut()) {
            fix(dir);
        }
        if let Some(llama) = self.rollout.llama_server.as_mut() {
            llama
                .binary
                .iter_mut()
                .chain(llama.gguf.iter_mut())
                .for_each(fix);
        }
    }

    /// Checks the values; the message starts with the key at fault.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(lora) = &self.lora {
            lora.validate()?;
        }
        for server in &self.agent.mcp {
            server.validate().map_err(|e| format!("agent.mcp: {e}"))?;
        }
        if !self.agent.format_bonus.is_finite() {
            return Err("agent.format_bonus: must be a finite number".into());
        }
        if agentfly_core::rollout::format::format_by_name(&self.agent.format).is_none() {
            return Err(format!(
                "agent.format: `{}` is not a format (hermes, react or code)",
                self.agent.format
            ));
        }
        let group = matches!(
            self.algorithm.estimator,
            Estimator::Grpo { .. } | Estimator::Rloo {}
        );
        if group && self.rollout.chains < 2 {
            return Err(format!(
                "rollout.chains: {} has a group baseline and needs at least 2 chains per sample",
                serde_json::to_value(&self.algorithm.estimator)
                    .ok()
                    .and_then(|v| v["name"].as_str().map(str::to_string))
                    .unwrap_or_default()
            ));
        }
        super::external_config::check(
            self.rollout.external.as_ref(),
            &self.agent.reward,
            !self.agent.tools.is_empty() || !self.agent.mcp.is_empty(),
            self.rollout.llama_server.is_some() || self.rollout.servers.is_some(),
            self.agent.format_bonus,
        )?;
        if let Some(servers) = &self.rollout.servers {
            if self.rollout.llama_server.is_some() {
                return Err("rollout.servers: roll out on [rollout.llama_server] or on \
                     [rollout.servers], not both"
                    .into());
            }
            agentfly_engine::server::WeightSync::new(servers)
                .map_err(|e| format!("rollout.servers: {}", e.0))?;
        }
        if self.rollout.samples_per_step == 0 {
            return Err("rollout.samples_per_step: must be at least 1".into());
        }
        if self.rollout.chains == 0 {
            return Err("rollout.chains: must be at least 1".into());
        }
        if self.train.steps == 0 && self.sft.is_none() {
            return Err("train.steps: must be at least 1 (or configure [sft])".into());
        }
        if let Some(sft) = &self.sft {
            if sft.epochs == 0 || sft.batch_size == 0 {
                return Err("sft.epochs / sft.batch_size: must be at least 1".into());
            }
            if !(sft.lr > 0.0 && sft.lr.is_finite()) {
                return Err("sft.lr: must be a positive number".into());
            }
        }
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return Err("optim.lr: must be a positive number".into());
        }
        let cap = self.train.behaviour_weight_cap;
        if !(cap >= 1.0 && cap.is_finite()) {
            return Err(format!(
                "train.behaviour_weight_cap: {cap} must be a number of at least 1 (it caps \
                 π_old / π_behaviour; below 1 it would shrink every token's loss)"
            ));
        }
        if self.train.loss.clip_low < 0.0 || self.train.loss.clip_high < 0.0 {
            return Err("train.loss.clip_low / clip_high: must not be negative".into());
        }
        if self.chain.max_turns == 0 {
            return Err("chain.max_turns: must be at least 1".into());
        }
        if self.train.steps > 0 {
            if !(self.chain.temperature > 0.0 && self.chain.temperature.is_finite()) {
                return Err(format!(
                    "chain.temperature: training rollouts must sample (a temperature above 0), got {}",
                    self.chain.temperature
                ));
            }
            if self.chain.top_p < 1.0 || self.chain.top_k > 0 {
                return Err(format!(
                    "chain.top_p / chain.top_k: training rollouts cannot sample from a truncated \
                     distribution (top_p {}, top_k {}): the trainer scores the full one at the \
                     sampling temperature, so the two would disagree; set top_p = 1 and top_k = 0",
                    self.chain.top_p, self.chain.top_k
                ));
            }
        }
        if self.train.mini_batches == 0 || self.train.ppo_epochs == 0 {
            return Err("train.ppo_epochs / train.mini_batches: must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.train.max_reward_failures) {
            return Err("train.max_reward_failures: a share between 0 and 1".into());
        }
        if !(0.0..=1.0).contains(&self.eval.max_failures) {
            return Err("eval.max_failures: a share between 0 and 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_servers_relative_program_and_directory_are_the_files_own() {
        let mut config: TrainerConfig = toml::from_str(
            r#"
            [model]
            path = "m.gguf"
            [data]
            train = "train.jsonl"
            [agent]
            tools = []
            reward = "exact"
            [output]
            dir = "out"
            [[agent.mcp]]
            name = "git"
            command = "../venv/bin/mcp-server-git"
            args = ["--repository", "."]
            cwd = "repo"
            [[agent.mcp]]
            name = "memory"
            command = "npx"
            args = ["-y", "server-memory"]
            "#,
        )
        .unwrap();
        // A file named by a relative path: made absolute, as the server runs elsewhere.
        config.resolve(Path::new("runs/git"));
        let [git, memory] = &config.agent.mcp[..] else {
            panic!("two servers")
        };
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            git.command.as_deref().map(Path::new),
            Some(&*here.join("runs/git/../venv/bin/mcp-server-git"))
        );
        assert_eq!(git.cwd.as_deref(), Some(&*here.join("runs/git/repo")));
        // Its arguments are the server's, passed as they are.
        assert_eq!(git.args, ["--repository", "."]);
        // A program found on PATH stays so, and no directory means the session's own.
        assert_eq!(memory.command.as_deref(), Some("npx"));
        assert_eq!(memory.cwd, None);
    }
}
