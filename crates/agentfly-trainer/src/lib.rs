//! Everything of agentfly that needs tensors, on Burn.
//!
//! | module | what lives there |
//! |---|---|
//! | [`model`] | one decoder for the Llama and Qwen2 families, rotary tables, KV cache |
//! | [`io`] | Hugging Face directories and GGUF files in, Hugging Face directories out |
//! | [`generate`] | batched KV-cache generation and sampling |
//! | [`engine`] | the generation engine: the model on its own thread, continuous batching, core's `Policy` |
//! | [`device`] | choosing the Burn device (`cpu`, `wgpu`, `cuda:N`) |
//!
//! Planned: `train` (log-probabilities, masked PPO / GRPO / RLOO / REINFORCE++ losses,
//! AdamW, checkpoints).

#![warn(missing_docs)]

pub mod device;
pub mod engine;
pub mod error;
pub mod generate;
pub mod io;
pub mod model;

pub use error::ModelError;
pub use io::Pretrained;
