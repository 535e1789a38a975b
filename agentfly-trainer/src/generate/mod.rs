//! Generation: batched prefill of prompts of different lengths, KV-cache decoding, and
//! sampling (greedy, temperature, top-k, top-p, seeded) with the log-probability of every
//! sampled token.

mod batch;
mod prefill;
mod prefix;
mod sampling;

pub use batch::{
    DecodeBatch, FinishReason, GenerateError, Generation, SequenceSpec, check_prompts, generate,
};
pub use sampling::{Sampler, SamplingParams};
