//! Test data (the reference fixtures and the SmolLM2 GGUF, found by `agentfly-testdata`:
//! missing data fails the test with the command to run) and helpers over it.

pub mod tiny_chat;

use burn::tensor::Device;
use safetensors::SafeTensors;
use std::path::PathBuf;

pub use crate::{fixtures, smollm2_gguf};

/// The CPU device the tests run on (flex).
pub fn device() -> Device {
    Device::flex()
}

/// `(shape, values)` of an f32 tensor and `(shape, values)` of an i64 tensor of a
/// reference safetensors file.
pub fn reference(path: PathBuf) -> (Vec<usize>, Vec<i64>, Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(&path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let ids = file.tensor("input_ids").unwrap();
    let logits = file.tensor("logits").unwrap();
    let id_values = ids
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let logit_values = logits
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (
        ids.shape().to_vec(),
        id_values,
        logits.shape().to_vec(),
        logit_values,
    )
}

/// Logits of one plain forward pass over `ids` shaped `shape`.
pub fn logits(model: &agentfly_model::Pretrained, ids: Vec<i64>, shape: [usize; 2]) -> Vec<f32> {
    use burn::tensor::{Int, Tensor, TensorData};
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, shape), &device());
    model
        .decoder
        .forward(ids, &model.rope)
        .into_data()
        .try_to_vec()
        .unwrap()
}

/// The largest absolute difference between two runs of numbers of one length.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The system prompt of the calculator rollout tests.
pub const CALCULATOR_SYSTEM: &str = "You solve arithmetic problems with tools. Call a tool by writing \
<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2 + 3 * 4\"}}</tool_call>. \
When you know the answer, submit it with \
<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"14\"}}</tool_call>.";

/// Calculator samples, each `(id, question, answer)` after one worked example, so the small
/// model uses the tools.
pub fn calculator_samples(questions: &[(&str, &str, i64)]) -> Vec<agentfly_core::Sample> {
    use serde_json::json;
    let shot = [
        json!({"role": "user", "content": "What is 17 * 3?"}),
        json!({"role": "assistant", "content": "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 3\"}}</tool_call>"}),
        json!({"role": "tool", "name": "calculator", "content": "51"}),
        json!({"role": "assistant", "content": "<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"51\"}}</tool_call>"}),
        json!({"role": "tool", "name": "submit_answer", "content": "Answer submitted: 51"}),
    ];
    questions
        .iter()
        .map(|&(id, question, answer)| {
            let mut messages = shot.to_vec();
            messages.push(json!({"role": "user", "content": question}));
            agentfly_core::Sample::new(id, json!({"messages": messages, "answer": answer}))
        })
        .collect()
}

/// What a calculator rollout varies: the policy, the chat parts of its model, sampling and
/// width.
pub struct CalculatorRollout<'a> {
    /// What generates.
    pub policy: &'a dyn agentfly_core::rollout::Policy,
    /// The model's tokenizer.
    pub tokenizer: &'a agentfly_core::chat::Tokenizer,
    /// The model's chat template.
    pub template: &'a agentfly_core::chat::ChatTemplate,
    /// The ids that end a turn.
    pub eos: &'a [u32],
    /// The sampling temperature.
    pub temperature: f32,
    /// Chains per sample.
    pub chains: usize,
    /// The most chains running at once.
    pub concurrency: usize,
}

impl CalculatorRollout<'_> {
    /// Runs `samples` with the calculator and submit_answer tools (Hermes, at most 3 turns
    /// of 40 tokens, the `exact_numeric` reward); the test crate must link agentfly_tools.
    pub fn run(
        &self,
        samples: &[agentfly_core::Sample],
        seed: u64,
    ) -> agentfly_core::rollout::RolloutOutput {
        use agentfly_core::env::{EnvPools, PoolConfig};
        use agentfly_core::rollout::{ChainConfig, ChainSetup, Rollout, format::Hermes};
        let toolbox = agentfly_core::Toolbox::from_names(&["calculator", "submit_answer"]).unwrap();
        let rewards = agentfly_core::Rewards::from_names(&["exact_numeric"]).unwrap();
        let config = ChainConfig {
            max_turns: 3,
            max_tokens_per_turn: 40,
            system_prompt: CALCULATOR_SYSTEM.into(),
            temperature: self.temperature,
            ..ChainConfig::default()
        };
        let rollout = Rollout {
            setup: ChainSetup {
                policy: self.policy,
                toolbox: &toolbox,
                format: &Hermes,
                template: self.template,
                tokenizer: self.tokenizer,
                end_of_turn: self.eos,
                rewards: Some((&rewards, "exact_numeric")),
                config: &config,
            },
            pools: EnvPools::new(PoolConfig::default()),
            chains: self.chains,
            concurrency: self.concurrency,
            seed,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(rollout.run(samples, |_| {}))
    }
}
