//! A task file (`agentfly run TASK.toml`): everything a run of the jobs' pipeline needs —
//! the model, the splits, the tools and reward, the chain and RL settings, a world to play
//! in, the words of the report, and presets — in one TOML. The built-in jobs are the same
//! thing made in code ([`Settings::task_spec`](super::Settings::task_spec)); each writes
//! its own as `task.toml` into its run directory. `docs/tasks.md` documents the file.

use crate::JobError;
use agentfly_core::rl::Estimator;
use agentfly_core::rollout::ChainConfig;
use agentfly_envs::RemoteConfig;
use agentfly_model::model::LoraConfig;
use agentfly_trainer::run::{
    AgentSection, AlgorithmSection, DataSection, EvalSection, ModelSection, OutputSection,
    RolloutSection, SftSection, TrainerConfig, set_key, toml_error,
};
use agentfly_trainer::train::{OptimConfig, TrainSection};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A task file: the trainer's sections (`[model]`, `[agent]`, `[chain]`, `[rollout]`,
/// `[algorithm]`, `[train]`, `[optim]`, `[lora]`, `[eval]`, as in `agentfly train`'s
/// configuration) with the run's own: `[task]`, `[data]` (four splits), `[sft]` and
/// `[output]` without their paths, `[report]`, `[world]` and `[presets.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Its name and the pipeline's own settings.
    pub task: TaskSection,
    /// The splits.
    pub data: SplitFiles,
    /// The policy to start from.
    pub model: ModelSection,
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
    /// The supervised warm start on `data.demos` (when the file names demonstrations).
    #[serde(default)]
    pub sft: SftSettings,
    /// Train low-rank adapters instead of every weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Checkpoints and event files (in the run directory's `out/`).
    #[serde(default)]
    pub output: OutputSettings,
    /// What a held-out evaluation tolerates.
    #[serde(default)]
    pub eval: EvalSection,
    /// A remote environment (a world server, one instance per chain) the tools act in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<RemoteConfig>,
    /// The words of the report.
    #[serde(default)]
    pub report: ReportSection,
    /// Named sets of values over the file's (`--preset NAME`), written like the file:
    /// `[presets.smoke]` then `train.steps = 2`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub presets: BTreeMap<String, toml::Table>,
}

/// `[task]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSection {
    /// Its name: in messages, the report, and the default run directory
    /// (`target/runs/NAME`).
    pub name: String,
    /// What one sample is called in the report.
    #[serde(default = "questions")]
    pub items: String,
    /// The system prompt of a closed-book baseline: the same model without tools, one
    /// turn, evaluated first. Absent: no such baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_book_prompt: Option<String>,
    /// A validation point every this many RL steps, and after the last (with `data.val`).
    #[serde(default = "five")]
    pub eval_every: usize,
    /// The preset applied (`--preset`; `default` without one).
    #[serde(default = "default_preset")]
    pub preset: String,
}

/// `[data]`: JSONL samples (`agentfly_core::Sample`), copied into the run directory's
/// `data/` and checked disjoint by question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitFiles {
    /// What RL trains on.
    pub train: PathBuf,
    /// Evaluated during RL (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val: Option<PathBuf>,
    /// The held-out split of the report's table.
    pub test: PathBuf,
    /// Demonstrations (whole conversations) for SFT before RL (optional: no SFT without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demos: Option<PathBuf>,
}

impl SplitFiles {
    /// The splits given, by name (`train`, `val`, `test`, `demos`).
    pub fn named(&self) -> Vec<(&'static str, &Path)> {
        [
            ("train", Some(&self.train)),
            ("val", self.val.as_ref()),
            ("test", Some(&self.test)),
            ("demos", self.demos.as_ref()),
        ]
        .into_iter()
        .filter_map(|(name, path)| path.map(|p| (name, p.as_path())))
        .collect()
    }
}

/// `[sft]`: as the trainer's, its data being `data.demos`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SftSettings {
    /// Passes over the demonstrations.
    pub epochs: usize,
    /// Demonstrations per update.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// Padded positions per micro-batch.
    pub micro_batch_tokens: usize,
}

impl Default for SftSettings {
    fn default() -> Self {
        let s = SftSection::new(PathBuf::new());
        Self {
            epochs: s.epochs,
            batch_size: s.batch_size,
            lr: s.lr,
            micro_batch_tokens: s.micro_batch_tokens,
        }
    }
}

/// `[output]`: as the trainer's, its directory being the run directory's `out/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputSettings {
    /// A checkpoint every this many RL steps (and at the end).
    pub checkpoint_every: usize,
    /// The latest checkpoints kept.
    pub keep_checkpoints: usize,
    /// TensorBoard's event files under `out/tensorboard/`.
    pub tensorboard: bool,
}

impl Default for OutputSettings {
    fn default() -> Self {
        let o = OutputSection::new(PathBuf::new());
        Self {
            checkpoint_every: o.checkpoint_every,
            keep_checkpoints: o.keep_checkpoints,
            tensorboard: o.tensorboard,
        }
    }
}

/// `[report]`: how the report describes the run (each has a plain default).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportSection {
    /// Its heading (default: `NAME agent: MODEL trained with agentfly`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// How the splits are disjoint (default: `by question`, the check every run makes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disjoint: Option<String>,
    /// What the demonstrations are (default: `demonstrations`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demos: Option<String>,
    /// What the closed-book result shows, after it (`the answers must be looked up`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_book: Option<String>,
    /// The reward in words (default: its name, and the format bonus).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<String>,
    /// A reward metric `score` in words (`The game's own score (0 to 1)`): when given, its
    /// mean per evaluation is reported beside accuracy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<String>,
}

fn questions() -> String {
    "questions".into()
}

fn five() -> usize {
    5
}

fn default_preset() -> String {
    "default".into()
}

/// A mistake in a task file: the file, then where and what.
fn file_error(path: &Path, message: impl std::fmt::Display) -> JobError {
    JobError::State(format!("{}: {message}", path.display()))
}

/// Merges `over` into `base`: tables key by key, any other value replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

impl TaskSpec {
    /// Reads a task file, applies `preset` (its `[presets.NAME]`) and then `sets`
    /// (`KEY=VALUE`, as `--set` on every command), and makes its relative paths relative to
    /// the file's directory. A mistake names the file, the line and the key.
    pub fn load(path: &Path, preset: Option<&str>, sets: &[String]) -> Result<Self, JobError> {
        let text = std::fs::read_to_string(path).map_err(JobError::io(path))?;
        // The file alone first: its mistakes are reported on its own lines.
        let mut spec: TaskSpec =
            toml::from_str(&text).map_err(|e| file_error(path, toml_error(&text, &e)))?;
        if preset.is_some() || !sets.is_empty() {
            let mut table: toml::Table =
                toml::from_str(&text).map_err(|e| file_error(path, toml_error(&text, &e)))?;
            let mut how = Vec::new();
            if let Some(name) = preset {
                let Some(over) = spec.presets.get(name) else {
                    let known: Vec<&str> = spec.presets.keys().map(String::as_str).collect();
                    return Err(file_error(
                        path,
                        format!(
                            "--preset {name}: the file has no [presets.{name}] (it has: {})",
                            if known.is_empty() {
                                "none".into()
                            } else {
                                known.join(", ")
                            }
                        ),
                    ));
                };
                merge(&mut table, over);
                how.push(format!("--preset {name}"));
            }
            for set in sets {
                set_key(&mut table, set).map_err(|e| file_error(path, e))?;
                how.push(format!("--set {set}"));
            }
            let merged = toml::to_string(&table).map_err(|e| file_error(path, e))?;
            spec = toml::from_str(&merged).map_err(|e| {
                file_error(
                    path,
                    format!("with {}: {}", how.join(" "), toml_error(&merged, &e)),
                )
            })?;
            if let Some(name) = preset {
                spec.task.preset = name.to_string();
            }
        }
        // Applied: what the run records is the values it runs with.
        spec.presets.clear();
        // Absolute: the run records where its files are, wherever it is run from.
        let file = std::path::absolute(path).map_err(JobError::io(path))?;
        spec.resolve(file.parent().unwrap_or(Path::new("/")));
        spec.validate().map_err(|e| file_error(path, e))?;
        Ok(spec)
    }

    /// Makes the relative paths relative to `base` (as the trainer's configuration does).
    pub fn resolve(&mut self, base: &Path) {
        let mut config = self.config_with(
            self.data.train.clone(),
            self.data.test.clone(),
            self.data.demos.clone(),
        );
        config.resolve(base);
        self.model = config.model;
        self.agent = config.agent;
        self.rollout = config.rollout;
        self.data.train = config.data.train;
        self.data.test = config.data.eval.unwrap_or_default();
        self.data.demos = config.sft.map(|s| s.data);
        if let Some(val) = &mut self.data.val
            && val.is_relative()
        {
            *val = base.join(&*val);
        }
        if let Some(world) = &mut self.world {
            // A started server runs in the file's directory unless told otherwise, so
            // `command = ["python3", "my_world.py"]` finds the script beside the file.
            match &mut world.cwd {
                None => world.cwd = Some(base.to_path_buf()),
                Some(cwd) if cwd.is_relative() => *cwd = base.join(&*cwd),
                Some(_) => {}
            }
            // A program named by a relative path (`../venv/bin/python`), not one on PATH.
            if let Some(program) = world.command.first_mut()
                && program.contains('/')
                && Path::new(program.as_str()).is_relative()
            {
                let joined = base.join(&*program);
                *program = std::path::absolute(&joined)
                    .unwrap_or(joined)
                    .to_string_lossy()
                    .into_owned();
            }
        }
    }

    /// Checks the values; the message starts with the key at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.task.name.trim().is_empty() {
            return Err("task.name: must not be empty".into());
        }
        if self.task.eval_every == 0 {
            return Err("task.eval_every: must be at least 1".into());
        }
        if self.agent.system_prompt.is_empty() == self.agent.system_prompt_file.is_none() {
            return Err(
                "agent.system_prompt / agent.system_prompt_file: give one of the two".into(),
            );
        }
        if let Some(world) = &self.world
            && world.command.is_empty() == world.url.is_none()
        {
            return Err("world: give `command` (a server to start per chain) or `url`".into());
        }
        self.trainer_config(Path::new("")).validate()
    }

    /// The trainer's configuration of a run of this task, whose directory is `run_dir`
    /// away from the configuration's (empty for the run directory itself): the data are the
    /// run's copies in `data/`, the system prompt its `system.txt`, the output `out/`.
    pub fn trainer_config(&self, run_dir: &Path) -> TrainerConfig {
        let data = run_dir.join("data");
        let mut config = self.config_with(
            data.join("train.jsonl"),
            data.join("test.jsonl"),
            self.data.demos.as_ref().map(|_| data.join("demos.jsonl")),
        );
        config.agent.system_prompt = String::new();
        config.agent.system_prompt_file = Some(run_dir.join("system.txt"));
        config
    }

    /// The trainer's configuration with these data.
    fn config_with(&self, train: PathBuf, test: PathBuf, demos: Option<PathBuf>) -> TrainerConfig {
        let sft = &self.sft;
        let output = &self.output;
        TrainerConfig {
            model: self.model.clone(),
            data: DataSection {
                train,
                eval: Some(test),
            },
            agent: self.agent.clone(),
            chain: self.chain.clone(),
            rollout: self.rollout.clone(),
            algorithm: self.algorithm.clone(),
            train: self.train.clone(),
            optim: self.optim.clone(),
            sft: demos.map(|data| SftSection {
                data,
                epochs: sft.epochs,
                batch_size: sft.batch_size,
                lr: sft.lr,
                micro_batch_tokens: sft.micro_batch_tokens,
            }),
            lora: self.lora.clone(),
            output: OutputSection {
                checkpoint_every: output.checkpoint_every,
                keep_checkpoints: output.keep_checkpoints,
                tensorboard: output.tensorboard,
                ..OutputSection::new("out".into())
            },
            eval: self.eval.clone(),
        }
    }

    /// The system prompt: `agent.system_prompt`, or the file it names.
    pub fn system_prompt(&self) -> Result<String, JobError> {
        match &self.agent.system_prompt_file {
            Some(file) if self.agent.system_prompt.is_empty() => std::fs::read_to_string(file)
                .map_err(|e| {
                    JobError::State(format!("agent.system_prompt_file: {}: {e}", file.display()))
                }),
            _ => Ok(self.agent.system_prompt.clone()),
        }
    }

    /// The RL algorithm's name (`grpo`, `rloo`, `reinforce++`, or `ppo` for GAE).
    pub fn algorithm_name(&self) -> String {
        match &self.algorithm.estimator {
            Estimator::Gae { .. } => "ppo".into(),
            other => serde_json::to_value(other)
                .ok()
                .and_then(|v| v["name"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{other:?}")),
        }
    }

    /// The tools the agent has, in words: the registered ones, then each MCP server's.
    pub fn tools_description(&self) -> String {
        let mut tools = self.agent.tools.clone();
        tools.extend(
            self.agent
                .mcp
                .iter()
                .map(|s| format!("the MCP server `{}`'s", s.name)),
        );
        if tools.is_empty() {
            "none".into()
        } else {
            tools.join(", ")
        }
    }

    /// The file as TOML, every default written out, after `header` (comment lines).
    pub fn to_toml(&self, header: &str) -> Result<String, JobError> {
        let body = toml::to_string_pretty(self)
            .map_err(|e| JobError::State(format!("a task file serializing: {e}")))?;
        Ok(format!("{header}{body}"))
    }
}

#[cfg(test)]
mod tests;
