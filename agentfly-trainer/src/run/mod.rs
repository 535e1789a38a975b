//! The training loop: rollouts through the generation engine, advantages, the masked
//! policy update, new weights to the engine without touching disk, metrics to JSONL,
//! atomic checkpoints, and resuming where a run stopped.
//!
//! | module | what lives there |
//! |---|---|
//! | `config` | [`TrainerConfig`]: the run's TOML configuration |
//! | `config_load` | reading it, with `--set key=value` overrides; errors name the file, the line and the key |
//! | `trainer` | [`Trainer`]: the run's parts; rolling out and evaluating |
//! | `setup` | building a `Trainer`: model, reference, critic, generator, resuming |
//! | `sampler` | [`Sampler`]: the training data's seeded order |
//! | `shaping` | optional reward shaping, kept apart from the task's reward |
//! | `rows` | trajectories → training rows: masks and advantages |
//! | `rl_step` | one RL step: rollouts with dynamic sampling, rows, update, weights to the engine; overlapped with the next rollout under `rollout.overlap` |
//! | `batch` | a rolled-out batch waiting for its update, kept in checkpoints; staleness from each turn's policy version |
//! | `generator` | what samples (the engine, llama.cpp servers under `[rollout.llama_server]`, vLLM or SGLang servers under `[rollout.servers]`) and how new weights reach it |
//! | `sft` | the supervised warm start |
//! | `train_loop` | the loop: SFT, steps, metrics, checkpoints, the final model |
//! | `eval` | [`EvalReport`]: held-out accuracy with its Wilson interval |
//! | `board` | the run's TensorBoard events: each step's numbers, distributions and sample chains, SFT's losses |
//! | `metrics` | [`StepMetrics`], the metrics log, progress bars, [`TrainSummary`] |
//! | `save`, [`checkpoint`] | writing the model and checkpoints; the atomic file operations under them |
//! | `error` | [`TrainError`] |
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In a binary that links its tool crates (agentfly_core::link!):
//! let mut trainer = agentfly_trainer::run::Trainer::from_config_file("train.toml")?;
//! let summary = trainer.train()?;
//! println!("{} steps, last reward {:?}", summary.steps, summary.last_reward);
//! # Ok(()) }
//! ```

mod batch;
mod board;
pub mod checkpoint;
mod config;
mod config_load;
mod error;
mod eval;
mod external;
mod external_config;
mod generator;
mod metrics;
mod rl_step;
mod rows;
mod sampler;
mod save;
mod setup;
mod sft;
mod shaping;
mod train_loop;
mod trainer;

pub use crate::train::TrainSection;
/// An MCP server of `[[agent.mcp]]` (and of `--mcp` on the commands and the jobs).
pub use agentfly_mcp::McpServerConfig;
pub use board::TENSORBOARD_DIR;
pub use config::{
    AgentSection, AlgorithmSection, ConfigError, DataSection, ModelSection, OutputSection,
    RolloutSection, RowShape, SftSection, TrainerConfig,
};
pub use config_load::{set_key, toml_error};
pub use error::TrainError;
pub use eval::{
    EvalReport, EvalSection, accuracy_of, correct_of, failed_of, failure_of, wilson_interval,
};
pub use external_config::ExternalAgentConfig;
pub use metrics::{MetricsLog, StepMetrics, TrainSummary, print_line, progress_bar};
pub use rows::{RowInputs, effective_mask, training_rows, turn_rows};
pub use sampler::Sampler;
pub use sft::{SFT_MODEL, SftReport};
pub use shaping::shape;
pub use trainer::Trainer;
