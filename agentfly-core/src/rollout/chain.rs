//! One chain: prompt → (generate → parse → call tools → observe)* → reward.
//!
//! Token-in/token-out: the model's sampled ids are kept unchanged (mask 1); what the
//! environment adds — the chat template's rendering of the tool results and the next
//! generation prompt — is taken as the difference of two renders of the conversation,
//! tokenized, and appended with mask 0. Decoding a trajectory therefore gives the
//! template's rendering of the conversation it holds.

use super::format::{CallParse, ToolCallFormat};
use super::policy::{GenerateRequest, GenerationEnd, Policy, PolicyError};
use super::trajectory::{CallRecord, ChainEnd, Trajectory, Turn};
use crate::chat::{ChatError, ChatTemplate, Conversation, Tokenizer};
use crate::tool::{CallContext, Observation, ToolErrorKind, Toolbox};
use crate::{RewardInput, Rewards, Sample};
use serde_json::{Value, json};
use std::time::Instant;

/// Stands in for a turn's text while the environment's part is worked out: the assistant's
/// message holds it in a render, and what follows it is what the environment appends.
pub const TURN_MARKER: &str = "\u{2983}agentfly-turn\u{2984}";

/// What the environment appends after a turn, from a render whose assistant message held
/// [`TURN_MARKER`]: the text after the marker, less the end-of-turn token's text when the
/// model sampled it (it is already in the trajectory). `None` when the template dropped the
/// marker (it does not extend a conversation by appending).
pub fn text_after_turn<'a>(
    rendered: &'a str,
    eot_text: &str,
    ended_by_eot: bool,
) -> Option<&'a str> {
    let at = rendered.find(TURN_MARKER)?;
    let after = &rendered[at + TURN_MARKER.len()..];
    Some(if ended_by_eot {
        after.strip_prefix(eot_text).unwrap_or(after)
    } else {
        after
    })
}

/// How chains run.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChainConfig {
    /// The most model turns.
    pub max_turns: usize,
    /// The most tokens one turn may generate.
    pub max_tokens_per_turn: usize,
    /// The most tokens of a whole trajectory (prompt included); past it the chain ends
    /// truncated.
    pub max_total_tokens: usize,
    /// A system message put before the sample's messages (none when empty).
    pub system_prompt: String,
    /// Sampling temperature (0 = greedy).
    pub temperature: f32,
    /// Nucleus sampling mass.
    pub top_p: f32,
    /// Top-k (0 = off).
    pub top_k: usize,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            max_turns: 4,
            max_tokens_per_turn: 256,
            max_total_tokens: 2048,
            system_prompt: String::new(),
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
        }
    }
}

/// What every chain of a run shares.
pub struct ChainSetup<'a> {
    /// The policy to sample from.
    pub policy: &'a dyn Policy,
    /// The tools the model may call.
    pub toolbox: &'a Toolbox,
    /// How it writes calls.
    pub format: &'a dyn ToolCallFormat,
    /// The model's chat template.
    pub template: &'a ChatTemplate,
    /// The model's tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// The model's end-of-turn ids (the first is the one the template writes).
    pub end_of_turn: &'a [u32],
    /// The rewards, and which one scores the chain.
    pub rewards: Option<(&'a Rewards, &'a str)>,
    /// How chains run.
    pub config: &'a ChainConfig,
}

/// Why a chain cannot start or go on (it ends with [`ChainEnd::Error`]).
#[derive(Debug, thiserror::Error)]
enum ChainError {
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error("the chat template does not extend the conversation by appending: {0}")]
    NotAppendOnly(String),
    #[error("{0}")]
    Sample(String),
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// The messages a sample starts with: its `messages` field, or its `question` (or
/// `prompt`) as one user message; after the system prompt if there is one.
pub fn sample_messages(sample: &Sample, system_prompt: &str) -> Result<Vec<Value>, String> {
    let mut messages = Vec::new();
    if !system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": system_prompt}));
    }
    if let Some(Value::Array(given)) = sample.field("messages") {
        messages.extend(given.iter().cloned());
    } else if let Some(Value::String(q)) =
        sample.field("question").or_else(|| sample.field("prompt"))
    {
        messages.push(json!({"role": "user", "content": q}));
    } else {
        return Err(format!(
            "sample `{}` has neither `messages` nor `question` nor `prompt` (its fields: {})",
            sample.id,
            sample.field_names().join(", ")
        ));
    }
    Ok(messages)
}

impl ChainSetup<'_> {
    fn render(&self, messages: &[Value], generation_prompt: bool) -> Result<String, ChatError> {
        let tools = self.toolbox.schemas();
        self.template.render(&Conversation {
            messages: messages.to_vec(),
            tools: (!tools.is_empty()).then_some(tools),
            add_generation_prompt: generation_prompt,
            ..Conversation::default()
        })
    }

    /// Runs one chain of `sample` (its `chain`-th), with `ctx` holding the chain's
    /// environments; scores it when rewards are set.
    pub async fn run(
        &self,
        sample: &Sample,
        chain: usize,
        seed: u64,
        mut ctx: CallContext,
    ) -> Trajectory {
        let start = Instant::now();
        ctx.set_sample(sample.clone());
        let mut trajectory = Trajectory {
            sample_id: sample.id.clone(),
            chain,
            ..Trajectory::default()
        };
        if let Err(e) = self.turns(sample, seed, &mut ctx, &mut trajectory).await {
            trajectory.finish_reason = ChainEnd::Error;
            trajectory.error = Some(e.to_string());
        }
        if let Some((rewards, name)) = self.rewards {
            let scored = rewards
                .score(
                    name,
                    RewardInput {
                        response: &trajectory.response,
                        trajectory: &trajectory,
                        sample,
                        ctx: &mut ctx,
                    },
                )
                .await;
            match scored {
                Ok(out) => {
                    trajectory.reward = Some(out.reward);
                    trajectory.reward_metrics = out.metrics;
                }
                Err(e) => trajectory.reward_error = Some(e.to_string()),
            }
        }
        drop(ctx); // the chain's environments go back to their pools
        trajectory.seconds = start.elapsed().as_secs_f64();
        trajectory
    }

    /// Ends the chain after `turn`, to which the environment appended nothing.
    fn end_after(trajectory: &mut Trajectory, mut turn: Turn, response: String, end: ChainEnd) {
        turn.end = turn.model_end;
        trajectory.turns.push(turn);
        trajectory.response = response;
        trajectory.finish_reason = end;
    }

    async fn turns(
        &self,
        sample: &Sample,
        seed: u64,
        ctx: &mut CallContext,
        trajectory: &mut Trajectory,
    ) -> Result<(), ChainError> {
        let config = self.config;
        let mut messages =
            sample_messages(sample, &config.system_prompt).map_err(ChainError::Sample)?;
        let prompt = self
            .tokenizer
            .encode(&self.render(&messages, true)?, false)?;
        trajectory.push(&prompt, None);
        trajectory.prompt_len = prompt.len();
        let eot_text = match self.end_of_turn.first() {
            Some(&id) => self.tokenizer.decode(&[id], false)?,
            None => String::new(),
        };
        for turn_index in 0..config.max_turns {
            let room = config
                .max_total_tokens
                .saturating_sub(trajectory.tokens.len());
            if room == 0 {
                trajectory.finish_reason = ChainEnd::Truncated;
                return Ok(());
            }
            let gen_start = Instant::now();
            let generated = self
                .policy
                .generate(GenerateRequest {
                    context: trajectory.tokens.clone(),
                    max_new_tokens: config.max_tokens_per_turn.min(room),
                    stop_ids: self.end_of_turn.to_vec(),
                    stop_strings: self.format.stop_strings(),
                    temperature: config.temperature,
                    top_p: config.top_p,
                    top_k: config.top_k,
                    seed: seed.wrapping_mul(1_000_003).wrapping_add(turn_index as u64),
                })
                .await?;
            let mut turn = Turn {
                start: trajectory.tokens.len(),
                generate_seconds: gen_start.elapsed().as_secs_f64(),
                policy_version: generated.policy_version,
                ..Turn::default()
            };
            trajectory.push(&generated.ids, Some(&generated.logprobs));
            turn.model_end = trajectory.tokens.len();
            let ended_by_eot = generated
                .ids
                .last()
                .is_some_and(|id| self.end_of_turn.contains(id));
            let body = if ended_by_eot {
                &generated.ids[..generated.ids.len() - 1]
            } else {
                &generated.ids[..]
            };
            let text = self.tokenizer.decode(body, false)?;
            turn.text = text.clone();
            let parsed = self.format.parse(&text);
            let out_of_room = generated.end == GenerationEnd::Length
                && trajectory.tokens.len() >= config.max_total_tokens;
            if out_of_room {
                Self::end_after(trajectory, turn, text, ChainEnd::Truncated);
                return Ok(());
            }
            if parsed.calls.is_empty() {
                Self::end_after(
                    trajectory,
                    turn,
                    parsed.final_answer.unwrap_or(text),
                    ChainEnd::NoToolCall,
                );
                return Ok(());
            }
            let tool_start = Instant::now();
            let (records, stop) = self.call_all(parsed.calls, ctx).await;
            turn.tool_seconds = tool_start.elapsed().as_secs_f64();
            turn.calls = records;
            match stop {
                Some(Stop::Answer(answer)) => {
                    Self::end_after(trajectory, turn, answer, ChainEnd::Answered);
                    return Ok(());
                }
                Some(Stop::Lost(why)) => {
                    Self::end_after(trajectory, turn, String::new(), ChainEnd::Error);
                    trajectory.error = Some(why);
                    return Ok(());
                }
                None => {}
            }

            // What the environment appends: the rest of the assistant turn as the template
            // closes it, the tool messages and the next generation prompt. The assistant's
            // text is stood in for by a marker, so templates that re-render earlier turns
            // (Qwen3 adds an empty think block) still give the text that follows it.
            messages.push(json!({"role": "assistant", "content": TURN_MARKER}));
            // The model reads what its own calls gave; calls its code made show inside them.
            let direct: Vec<&CallRecord> = turn.calls.iter().filter(|c| c.via.is_none()).collect();
            for call in &direct {
                messages
                    .push(json!({"role": "tool", "name": call.name, "content": call.observation}));
            }
            let next = self.render(&messages, true)?;
            let env_text = text_after_turn(&next, &eot_text, ended_by_eot).ok_or_else(|| {
                ChainError::NotAppendOnly("the template drops the assistant's text".into())
            })?;
            let last = messages.len() - direct.len() - 1;
            messages[last]["content"] = Value::String(text.clone());
            let env_ids = self.tokenizer.encode(env_text, false)?;
            trajectory.push(&env_ids, None);
            turn.end = trajectory.tokens.len();
            trajectory.turns.push(turn);
            if trajectory.tokens.len() >= config.max_total_tokens {
                trajectory.finish_reason = ChainEnd::Truncated;
                return Ok(());
            }
        }
        trajectory.finish_reason = ChainEnd::MaxTurns;
        Ok(())
    }

    /// Runs the calls of a turn; returns their records, in the order written, and, when a
    /// terminal tool succeeded, the answer, or when a call lost the chain's environment,
    /// why (calls written after either do not run). Calls up
    /// to a terminal one run concurrently: stateless tools each in a context of their own,
    /// stateful ones in order in the chain's context (they share its environments).
    async fn call_all(
        &self,
        calls: Vec<CallParse>,
        ctx: &mut CallContext,
    ) -> (Vec<CallRecord>, Option<Stop>) {
        let mut records = Vec::with_capacity(calls.len());
        let mut rest = calls.into_iter();
        loop {
            let mut segment = Vec::new();
            for call in rest.by_ref() {
                let terminal = self.spec_of(&call).is_some_and(|s| s.options.terminal);
                segment.push(call);
                if terminal {
                    break;
                }
            }
            if segment.is_empty() {
                return (records, None);
            }
            for (done, stop) in self.call_segment(segment, ctx).await {
                records.extend(done);
                if stop.is_some() {
                    return (records, stop);
                }
            }
        }
    }

    fn spec_of(&self, call: &CallParse) -> Option<&'static crate::tool::ToolSpec> {
        match call {
            CallParse::Call(call) => self.toolbox.get(&call.name),
            CallParse::Malformed { .. } => None,
        }
    }

    async fn call_segment(
        &self,
        calls: Vec<CallParse>,
        ctx: &mut CallContext,
    ) -> Vec<(Vec<CallRecord>, Option<Stop>)> {
        let (stateful, stateless): (Vec<_>, Vec<_>) = calls
            .into_iter()
            .enumerate()
            .partition(|(_, call)| self.spec_of(call).is_some_and(|s| s.options.env.is_some()));
        let free =
            futures_util::future::join_all(stateless.into_iter().map(|(i, call)| async move {
                (i, self.one_call(&mut CallContext::new(), call).await)
            }));
        let bound = async {
            let mut done = Vec::with_capacity(stateful.len());
            for (i, call) in stateful {
                done.push((i, self.one_call(ctx, call).await));
            }
            done
        };
        let (mut done, bound) = futures_util::future::join(free, bound).await;
        done.extend(bound);
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, outcome)| outcome).collect()
    }

    /// One call: its record, then the records of the calls it made from inside (code
    /// calling tools), and whether the chain stops: when it or one of those is a terminal
    /// tool's success (the answer) or lost the chain's environment.
    async fn one_call(
        &self,
        ctx: &mut CallContext,
        call: CallParse,
    ) -> (Vec<CallRecord>, Option<Stop>) {
        let start = Instant::now();
        drop(ctx.take_nested_calls());
        let (name, arguments, observation): (String, Value, Observation) = match call {
            CallParse::Call(call) => {
                let observation = self
                    .toolbox
                    .call(ctx, &call.name, call.arguments.clone())
                    .await;
                (call.name, call.arguments, observation)
            }
            CallParse::Malformed { text, error } => (
                String::new(),
                Value::String(text),
                Observation {
                    text: format!("Error: the tool call could not be read: {error}"),
                    is_error: true,
                    error_kind: None,
                    terminal: false,
                    truncated: false,
                },
            ),
        };
        let seconds = start.elapsed().as_secs_f64();
        let mut stop = Stop::of(&arguments, &observation);
        let mut records = vec![record(name, arguments, observation, seconds, None)];
        for nested in ctx.take_nested_calls() {
            if stop.is_none() {
                stop = Stop::of(&nested.arguments, &nested.observation);
            }
            let mut call = record(
                nested.name,
                nested.arguments,
                nested.observation,
                nested.seconds,
                Some(nested.via.to_string()),
            );
            call.repeats = nested.repeats;
            records.push(call);
        }
        (records, stop)
    }
}

/// Why a turn's calls end the chain.
enum Stop {
    /// A terminal tool succeeded: its `answer` argument, else its text.
    Answer(String),
    /// A call lost the chain's environment: the observation's text.
    Lost(String),
}

impl Stop {
    fn of(arguments: &Value, observation: &Observation) -> Option<Stop> {
        if observation.error_kind == Some(ToolErrorKind::EnvironmentLost) {
            return Some(Stop::Lost(observation.text.clone()));
        }
        observation.terminal.then(|| {
            Stop::Answer(match arguments.get("answer") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => observation.text.clone(),
            })
        })
    }
}

fn record(
    name: String,
    arguments: Value,
    observation: Observation,
    seconds: f64,
    via: Option<String>,
) -> CallRecord {
    let error = observation.is_error.then(|| {
        observation
            .error_kind
            .map_or_else(|| "parse error".to_string(), |k| k.to_string())
    });
    CallRecord {
        name,
        arguments,
        observation: observation.text,
        is_error: observation.is_error,
        error,
        seconds,
        via,
        repeats: 0,
    }
}
