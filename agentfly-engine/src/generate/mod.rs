//! Generation: batched prefill of prompts of different lengths, KV-cache decoding, and
//! sampling (greedy, temperature, top-k, top-p, seeded) with the log-probability of every
//! sampled token.

mod batch;
mod device_sampling;
mod pool;
mod prefill;
mod prefix;
mod sampling;

pub use batch::{
    DecodeBatch, FinishReason, GenerateError, Generation, SequenceSpec, check_prompts,
};
pub use sampling::{Sampler, SamplingParams};

use agentfly_core::chat::Tokenizer;
use agentfly_model::Pretrained;

/// Generates a continuation of every prompt. `tokenizer` is needed only for
/// `stop_strings`. A sequence stops with [`FinishReason::Length`] at `max_new_tokens` or
/// when it fills the model's context, whichever comes first.
pub fn generate(
    model: &Pretrained,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    tokenizer: Option<&Tokenizer>,
) -> Result<Vec<Generation>, GenerateError> {
    check_prompts(model, prompts)?;
    let mut stop_ids = params.stop_ids.clone();
    if !params.ignore_eos {
        stop_ids.extend(model.eos_ids());
    }
    let mut batch = DecodeBatch::new();
    let sequences = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            let spec = SequenceSpec {
                prompt: prompt.clone(),
                sampler: Sampler::new(params, i as u64),
                max_new_tokens: params.max_new_tokens,
                stop_ids: stop_ids.clone(),
                stop_strings: params.stop_strings.clone(),
            };
            (i, spec)
        })
        .collect();
    let mut outputs: Vec<Option<Generation>> = vec![None; prompts.len()];
    let mut collect = |done: Vec<(usize, Generation)>| {
        for (i, generation) in done {
            outputs[i] = Some(generation);
        }
    };
    collect(batch.admit(model, sequences));
    while !batch.is_empty() {
        collect(batch.step(model, tokenizer));
    }
    let outputs: Vec<Generation> = outputs
        .into_iter()
        .map(|g| g.expect("every sequence finishes"))
        .collect();
    if let Some((index, g)) = outputs
        .iter()
        .enumerate()
        .find(|(_, g)| g.finish_reason == FinishReason::NonFinite)
    {
        return Err(GenerateError::NonFinite {
            index,
            generated: g.new_ids.len(),
        });
    }
    Ok(outputs)
}
