//! Everything of agentfly that needs tensors, on Burn.
//!
//! | module | what lives there |
//! |---|---|
//! | [`model`] | one decoder for the Llama and Qwen2 families, rotary tables, KV cache |
//! | [`io`] | Hugging Face directories and GGUF files in, Hugging Face directories out |
//! | [`generate`] | batched KV-cache generation and sampling |
//! | [`engine`] | the generation engine: the model on its own thread, continuous batching, core's `Policy` |
//! | [`train`] | per-token log-probs, masked PPO-family and SFT losses, the critic's value head, AdamW with global-norm clipping |
//! | [`run`] | the training loop: `Trainer` from a TOML config, metrics, atomic checkpoints, resume, evaluation |
//! | [`device`] | choosing the Burn device (`cpu`, `wgpu`, `cuda:N`) |
//!
//! Planned: a faster training device (libtorch), the calculator main job.

#![warn(missing_docs)]

pub mod device;
pub mod engine;
pub mod error;
pub mod generate;
pub mod io;
pub mod model;
pub mod run;
pub mod train;

pub use error::ModelError;
pub use io::Pretrained;
