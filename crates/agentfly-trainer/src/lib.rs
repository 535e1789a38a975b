//! Everything of agentfly that needs tensors, on Burn. Nothing lives here yet; what will:
//!
//! - `model`: one decoder for the Llama and Qwen2 families, loaded from a Hugging Face
//!   directory or a GGUF file and saved back in Hugging Face layout;
//! - `generate`: batched KV-cache generation, implementing agentfly-core's `Policy`;
//! - `train`: log-probabilities, masked PPO / GRPO / RLOO / REINFORCE++ losses, AdamW,
//!   checkpoints and evaluation.
//!
//! Backends are cargo features picked at run time by the Burn device.

#![warn(missing_docs)]
