//! The inference engine of agentfly: batched KV-cache generation from an
//! `agentfly-model` decoder, and core's `Policy` either on the engine or on inference
//! servers (llama.cpp, vLLM, SGLang). Inference from a trained policy needs this crate and
//! nothing of training.
//!
//! | module | what lives there |
//! |---|---|
//! | [`generate`] | batched KV-cache generation and sampling |
//! | [`engine`] | the generation engine: the model on its own thread, continuous batching, core's `Policy` |
//! | [`server`] | core's `Policy` over llama.cpp / vLLM / SGLang servers instead of the engine |
//!
//! Generating from a policy (here the repository's tiny Qwen2 fixture; a trained run's
//! `model/` directory loads the same way). The engine runs the model on a thread of its own
//! and batches the requests of every caller; a chain asks it through core's `Policy`:
//!
//! ```
//! use agentfly_core::rollout::{GenerateRequest, Policy};
//! use agentfly_engine::engine::{Engine, EngineConfig};
//! use agentfly_model::Pretrained;
//!
//! let model = Pretrained::load("../fixtures/tiny-qwen2", &burn::tensor::Device::flex())?;
//! let engine = Engine::start(model, EngineConfig::default());
//! let request = GenerateRequest {
//!     context: vec![37, 235, 396, 72, 255, 393, 203, 133], // token ids
//!     max_new_tokens: 3,
//!     stop_ids: Vec::new(),
//!     stop_strings: Vec::new(),
//!     temperature: 0.0, // greedy
//!     top_p: 1.0,
//!     top_k: 0,
//!     seed: 0,
//! };
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let generated = runtime.block_on(engine.generate(request))?;
//! assert_eq!(generated.ids, [268, 506, 63]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod engine;
pub mod generate;
pub mod server;
mod sync;
