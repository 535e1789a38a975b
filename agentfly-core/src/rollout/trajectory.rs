//! The record of one chain: token-in/token-out, with the loss mask, the sampled
//! log-probs, each turn's span and calls, the reward and why it ended.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a chain ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainEnd {
    /// A terminal tool (e.g. `submit_answer`) succeeded.
    Answered,
    /// A turn had no tool call: its text is the answer.
    #[default]
    NoToolCall,
    /// The turn limit was reached.
    MaxTurns,
    /// The token budget (or the model's context) ran out; the trajectory is cut.
    Truncated,
    /// The chain could not go on (the policy failed, the template cannot extend).
    Error,
}

/// One tool call of a turn and its outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The tool's name as the model wrote it (empty when the call could not be read).
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// What the model read back.
    pub observation: String,
    /// Was it an error (unreadable call, unknown tool, bad arguments, failure, timeout)?
    pub is_error: bool,
    /// The kind of error, e.g. `"parse error"`, `"unknown tool"`, `"timed out"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds the call took.
    pub seconds: f64,
    /// The tool whose call made this one from inside (code-as-action: a function called in
    /// the `code_interpreter`'s code); `None` for a call the model wrote itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Further calls refused the same way right after this one (past a call limit), counted
    /// and not recorded one by one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeats: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One model turn: the span of its sampled tokens, then the span of what the environment
/// appended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// First token the model sampled in this turn.
    pub start: usize,
    /// One past the last sampled token (`start..model_end` has mask 1).
    pub model_end: usize,
    /// One past the last token the environment appended (`model_end..end` has mask 0).
    pub end: usize,
    /// The model's text of this turn.
    pub text: String,
    /// The calls it made.
    pub calls: Vec<CallRecord>,
    /// Seconds spent generating.
    pub generate_seconds: f64,
    /// Seconds spent in tools.
    pub tool_seconds: f64,
    /// The version of the policy's weights that sampled this turn
    /// ([`Generated::policy_version`](super::Generated::policy_version)).
    #[serde(default)]
    pub policy_version: u64,
}

/// One chain's trajectory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The sample the chain started from.
    pub sample_id: String,
    /// Which of the sample's chains (0..n).
    pub chain: usize,
    /// Every token: the prompt, then each turn's sampled and appended tokens.
    pub tokens: Vec<u32>,
    /// 1 on tokens the model sampled, 0 on the prompt and on what the environment appended.
    pub loss_mask: Vec<u8>,
    /// The sampling log-prob of each token (0 where the mask is 0).
    pub logprobs: Vec<f32>,
    /// Prompt length in tokens.
    pub prompt_len: usize,
    /// The turns, in order.
    pub turns: Vec<Turn>,
    /// The final answer text (a terminal tool's `answer`, or the last turn's text).
    pub response: String,
    /// The reward (`None` until scored, or when scoring failed).
    pub reward: Option<f32>,
    /// Extra numbers from the reward.
    #[serde(default)]
    pub reward_metrics: BTreeMap<String, f64>,
    /// Why scoring failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_error: Option<String>,
    /// Why the chain ended.
    pub finish_reason: ChainEnd,
    /// What went wrong, when it ended with [`ChainEnd::Error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall-clock seconds of the whole chain.
    pub seconds: f64,
}

/// One row of the per-turn view (L0): the context before a turn, and the turn's own tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow<'a> {
    /// Everything before the turn (mask 0 for the loss of this row).
    pub context: &'a [u32],
    /// The turn's sampled tokens followed by what the environment appended.
    pub tokens: &'a [u32],
    /// 1 on the sampled tokens.
    pub loss_mask: &'a [u8],
    /// Their sampling log-probs.
    pub logprobs: &'a [f32],
}

impl Trajectory {
    /// The chain as the model wrote it, with what the tools answered, how it ended and its
    /// reward: what reports and TensorBoard show.
    pub fn transcript(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for (i, turn) in self.turns.iter().enumerate() {
            let _ = writeln!(s, "[model, turn {}]\n{}", i + 1, turn.text.trim_end());
            for call in &turn.calls {
                let name = if call.name.is_empty() {
                    "?"
                } else {
                    &call.name
                };
                let _ = writeln!(
                    s,
                    "[{name} → {}]{}",
                    call.observation.trim_end(),
                    call.error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
            }
        }
        let mut response: String = self.response.chars().take(60).collect();
        if response.len() < self.response.len() {
            response.push('…');
        }
        let _ = writeln!(
            s,
            "[ended: {:?}; answer read: {response:?}; reward {}]",
            self.finish_reason,
            self.reward.map_or("-".into(), |r| r.to_string())
        );
        s
    }

    /// Appends `ids`: sampled by the model, with their `logprobs` (mask 1), or added by the
    /// environment or the prompt when `logprobs` is `None` (mask 0, log-prob 0).
    pub fn push(&mut self, ids: &[u32], logprobs: Option<&[f32]>) {
        self.tokens.extend_from_slice(ids);
        let mask = u8::from(logprobs.is_some());
        self.loss_mask.extend(std::iter::repeat_n(mask, ids.len()));
        match logprobs {
            Some(lp) => self.logprobs.extend_from_slice(lp),
            None => self.logprobs.extend(std::iter::repeat_n(0.0, ids.len())),
        }
    }

    /// Tokens the model sampled.
    pub fn sampled_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m == 1).count()
    }

    /// Number of model turns.
    pub fn num_turns(&self) -> usize {
        self.turns.len()
    }

    /// All tool calls, in order.
    pub fn calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.turns.iter().flat_map(|t| t.calls.iter())
    }

    /// The per-turn view: one row per turn. The rows' `tokens` concatenated after the
    /// prompt are the whole trajectory.
    pub fn turn_rows(&self) -> Vec<TurnRow<'_>> {
        self.turns
            .iter()
            .map(|t| TurnRow {
                context: &self.tokens[..t.start],
                tokens: &self.tokens[t.start..t.end],
                loss_mask: &self.loss_mask[t.start..t.end],
                logprobs: &self.logprobs[t.start..t.end],
            })
            .collect()
    }
}
