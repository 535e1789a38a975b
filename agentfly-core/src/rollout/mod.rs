//! Rollout: chains of generate → call tools → observe, and the trajectories they leave.
//!
//! - [`format`](mod@format): how tool calls are written and read (Hermes, ReAct, code-as-action);
//! - [`Policy`]: the model, token ids in, sampled ids and log-probs out;
//! - [`ChainSetup::run`]: one chain, token-in/token-out with its loss mask;
//! - [`Trajectory`]: what a chain leaves, whole (AgentFly) or one row per turn (L0);
//! - [`Rollout`]: samples × n chains with bounded concurrency, and their [`RolloutSummary`].

mod chain;
mod demo;
pub mod format;
mod policy;
mod run;
mod trajectory;

pub use chain::{ChainConfig, ChainSetup, TURN_MARKER, sample_messages, text_after_turn};
pub use demo::{DemoError, demonstration};
pub use policy::{GenerateRequest, Generated, GenerationEnd, Policy, PolicyError, ScriptedPolicy};
pub use run::{Rollout, RolloutOutput, RolloutSummary, chain_seed};
pub use trajectory::{CallRecord, ChainEnd, Trajectory, Turn, TurnRow};
