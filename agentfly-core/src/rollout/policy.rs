//! The model as the rollout sees it: token ids in, sampled ids and their log-probs out.

use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// One generation request: the chain's whole context so far and how to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Every token of the chain so far (prompt, earlier turns, observations).
    pub context: Vec<u32>,
    /// The most tokens to generate this turn.
    pub max_new_tokens: usize,
    /// Ids that end the turn (the model's end-of-turn token is added by the policy).
    pub stop_ids: Vec<u32>,
    /// Strings that end the turn (e.g. ReAct's `Observation:`).
    pub stop_strings: Vec<String>,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f32,
    /// Nucleus sampling mass (1 = off).
    pub top_p: f32,
    /// Keep the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Seed of this request's random stream.
    pub seed: u64,
}

/// Why a turn's generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationEnd {
    /// A stop id or stop string.
    Stop,
    /// `max_new_tokens` or the model's context length.
    Length,
}

/// What the policy generated for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The sampled ids (the stop id that ended them included).
    pub ids: Vec<u32>,
    /// The log-probability of each sampled id under the sampling distribution.
    pub logprobs: Vec<f32>,
    /// Why it stopped.
    pub end: GenerationEnd,
    /// The version of the weights that generated it (the trainer counts RL updates; a
    /// policy whose weights never change says 0).
    pub policy_version: u64,
}

/// The policy could not generate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("generation failed: {0}")]
pub struct PolicyError(pub String);

/// A model the rollout can sample from. The trainer's engine implements it by batching the
/// requests of all waiting chains; [`ScriptedPolicy`] replays given outputs.
///
/// Implementations write `async fn generate` under [`async_trait`](crate::async_trait) (the
/// rollout holds policies as `&dyn Policy`, which native `async fn` in traits does not allow):
///
/// ```
/// use agentfly_core::rollout::{GenerateRequest, Generated, GenerationEnd, Policy, PolicyError};
///
/// /// Answers every request with the end-of-turn id alone.
/// struct Silent {
///     end_of_turn: u32,
/// }
///
/// #[agentfly_core::async_trait]
/// impl Policy for Silent {
///     async fn generate(&self, _request: GenerateRequest) -> Result<Generated, PolicyError> {
///         Ok(Generated {
///             ids: vec![self.end_of_turn],
///             logprobs: vec![0.0],
///             end: GenerationEnd::Stop,
///             policy_version: 0,
///         })
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Policy: Send + Sync {
    /// Generates a continuation of `request.context`.
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError>;
}

/// A policy that replays scripted turns through the same code path as a model: each
/// request takes the next script entry, tokenized, followed by the end-of-turn id (unless
/// the entry is cut by `max_new_tokens`). For tests and for replaying logged outputs.
pub struct ScriptedPolicy {
    turns: Mutex<std::collections::VecDeque<Vec<u32>>>,
    end_of_turn: u32,
    requests: Mutex<Vec<GenerateRequest>>,
}

impl ScriptedPolicy {
    /// Replays `turns` (already tokenized), each closed with `end_of_turn`.
    pub fn new(turns: Vec<Vec<u32>>, end_of_turn: u32) -> Self {
        Self {
            turns: Mutex::new(turns.into()),
            end_of_turn,
            requests: Mutex::new(Vec::new()),
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<GenerateRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait::async_trait]
impl Policy for ScriptedPolicy {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        let next = self
            .turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front();
        let max = request.max_new_tokens;
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(request);
        let mut ids = next.ok_or_else(|| PolicyError("the script has no more turns".into()))?;
        ids.push(self.end_of_turn);
        let end = if ids.len() > max {
            ids.truncate(max);
            GenerationEnd::Length
        } else {
            GenerationEnd::Stop
        };
        Ok(Generated {
            logprobs: vec![-0.5; ids.len()],
            ids,
            end,
            policy_version: 0,
        })
    }
}
