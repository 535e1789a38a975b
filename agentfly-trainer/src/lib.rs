//! The trainer of agentfly, on Burn: one update (per-token log-probabilities, the masked
//! PPO-family and SFT losses, the actor, its reference and critic, AdamW) and the training
//! loop around the engine of `agentfly-engine` and the model of `agentfly-model`.
//!
//! | module | what lives there |
//! |---|---|
//! | [`train`] | one update: per-token log-probs, the masked PPO-family and SFT losses, the actor, its reference and critic, AdamW with global-norm clipping |
//! | [`tensorboard`] | TensorBoard event files (scalars, histograms, text) on prost |
//! | [`run`] | the training loop: `Trainer` from a TOML config, rollouts → rows → updates, SFT, metrics, atomic checkpoints, resume, evaluation |
//!
//! The end-to-end jobs built on this (the calculator agent) are in `agentfly-jobs`.

#![warn(missing_docs)]

pub mod run;
mod sync;
pub mod tensorboard;
pub mod train;
