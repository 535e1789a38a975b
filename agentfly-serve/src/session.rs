//! Sessions: what a client whose base URL is `/sessions/{ID}/v1` sampled, recorded as
//! trajectories token for token.
//!
//! A request whose messages extend the session's last prompt and reply continues the same
//! trajectory: what the client added (tool results, a user message, the next generation
//! prompt) is the difference of two renders of the conversation, tokenized, with mask 0,
//! exactly as agentfly's own chains append observations; the model's ids stay as sampled.
//! A request that rewrote the history starts a new trajectory (one row per context, as L0
//! trains). Nothing the model sampled is ever tokenized again.

use crate::ApiError;
use crate::model::ChatModel;
use agentfly_core::rollout::{
    CallRecord, ChainEnd, Generated, TURN_MARKER, Trajectory, Turn, text_after_turn,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

/// How a session samples when its owner (the trainer) fixes it: the client's own sampling
/// fields are then ignored, so every episode is sampled as the run says.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Temperature (0 = greedy).
    pub temperature: f32,
    /// Nucleus mass.
    pub top_p: f32,
    /// Top-k (0 = off).
    pub top_k: usize,
    /// The most tokens per turn.
    pub max_tokens: usize,
    /// The episode's seed: turn `i` samples with `seed * 1_000_003 + i`, as a chain does.
    pub seed: u64,
}

/// What a session is opened with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionOptions {
    /// The sample the episode plays (its trajectories' `sample_id`; the session id if empty).
    pub sample_id: String,
    /// Which of the sample's episodes.
    pub chain: usize,
    /// Fixed sampling, or the client's.
    pub sampling: Option<Sampling>,
    /// The most model turns (none: no limit).
    pub max_turns: Option<usize>,
    /// The most tokens of a trajectory (none: the model's context).
    pub max_total_tokens: Option<usize>,
}

/// What a session left: its trajectories (each with the reward, once posted) and the reward.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRecord {
    /// The trajectories, in order.
    pub trajectories: Vec<Trajectory>,
    /// The posted reward.
    pub reward: Option<f32>,
    /// The posted metrics.
    pub metrics: BTreeMap<String, f64>,
}

/// The trajectory being extended.
struct Open {
    trajectory: Trajectory,
    /// The messages rendered so far, the last reply's as the model wrote it.
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    ended_by_eot: bool,
}

impl Open {
    /// Appends what the client added (mask 0): it closes the last turn, and its tool results
    /// are that turn's calls' observations.
    fn append(&mut self, env_ids: &[u32], messages: Vec<Value>, tool_results: Vec<String>) {
        let t = &mut self.trajectory;
        t.push(env_ids, None);
        if let Some(last) = t.turns.last_mut() {
            last.end = t.tokens.len();
            for (call, result) in last.calls.iter_mut().zip(tool_results) {
                call.observation = result;
            }
        }
        self.messages = messages;
    }
}

/// One session.
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) options: SessionOptions,
    open: Option<Open>,
    done: Vec<Trajectory>,
    pub(crate) reward: Option<(f32, BTreeMap<String, f64>)>,
    pub(crate) turns: usize,
    pub(crate) last_used: Instant,
    created: Instant,
    /// The episode's budget is spent (its turns, or its tokens by a generation that filled
    /// them): it ended as a chain ends, and takes no more generations.
    pub(crate) spent: bool,
}

/// Where a generation starts: the context, and how it joins the session.
pub(crate) struct Prepared {
    pub context: Vec<u32>,
    join: Join,
}

enum Join {
    /// Not recorded.
    None,
    /// Continues the open trajectory: what the client added, as ids, and its messages.
    Extend {
        env_ids: Vec<u32>,
        messages: Vec<Value>,
        tool_results: Vec<String>,
    },
    /// A new trajectory from this prompt.
    New {
        messages: Vec<Value>,
        tools: Option<Vec<Value>>,
    },
}

impl Prepared {
    /// A generation that is not recorded.
    pub(crate) fn unrecorded(context: Vec<u32>) -> Self {
        Self {
            context,
            join: Join::None,
        }
    }
}

impl Session {
    pub(crate) fn new(id: String, mut options: SessionOptions) -> Self {
        if options.sample_id.is_empty() {
            options.sample_id = id.clone();
        }
        Self {
            id,
            options,
            open: None,
            done: Vec::new(),
            reward: None,
            turns: 0,
            last_used: Instant::now(),
            created: Instant::now(),
            spent: false,
        }
    }

    pub(crate) fn ended(&self) -> bool {
        self.reward.is_some()
    }

    /// The context of a request whose messages are `messages` (template shape).
    pub(crate) fn prepare(
        &self,
        model: &ChatModel,
        messages: Vec<Value>,
        tools: Option<Vec<Value>>,
    ) -> Result<Prepared, ApiError> {
        if let Some(open) = &self.open {
            let n = open.messages.len();
            if messages.len() > n && messages[..n] == open.messages[..] && tools == open.tools {
                let added = &messages[n..];
                let mut marked = open.messages.clone();
                marked[n - 1]["content"] = Value::String(TURN_MARKER.into());
                marked.extend_from_slice(added);
                let next = model.render(&marked, tools.as_deref(), true)?;
                if let Some(env_text) = text_after_turn(&next, &model.eot_text, open.ended_by_eot) {
                    let env_ids = model.encode(env_text)?;
                    let mut context = open.trajectory.tokens.clone();
                    context.extend_from_slice(&env_ids);
                    let tool_results = added
                        .iter()
                        .filter(|m| m["role"] == "tool")
                        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                        .collect();
                    return Ok(Prepared {
                        context,
                        join: Join::Extend {
                            env_ids,
                            messages,
                            tool_results,
                        },
                    });
                }
            }
        }
        let prompt = model.encode(&model.render(&messages, tools.as_deref(), true)?)?;
        Ok(Prepared {
            context: prompt,
            join: Join::New { messages, tools },
        })
    }

    /// Records what the client added in `prepared` (mask 0) without a generation: the
    /// request could not be served (the episode's turns or tokens are spent), and the
    /// trajectory ends as a chain's does, with the last observation appended.
    pub(crate) fn record_added(&mut self, model: &ChatModel, prepared: Prepared) {
        self.last_used = Instant::now();
        if let Join::Extend {
            env_ids,
            messages,
            tool_results,
        } = prepared.join
            && let Some(open) = &mut self.open
        {
            open.append(&env_ids, messages, tool_results);
        }
        if let Some(open) = self.open.take() {
            self.done.push(self.close(open, model));
        }
        self.spent = true;
    }

    /// Trajectories recorded so far, the open one included.
    pub(crate) fn count(&self) -> usize {
        self.done.len() + usize::from(self.open.is_some())
    }

    /// Records a generation made from `prepared`: `generated` as sampled, its text, the
    /// calls read from it.
    pub(crate) fn record(
        &mut self,
        model: &ChatModel,
        prepared: Prepared,
        generated: &Generated,
        text: &str,
        calls: &[(String, Value)],
        seconds: f64,
    ) {
        self.turns += 1;
        self.last_used = Instant::now();
        let mut open = match prepared.join {
            Join::None => return,
            Join::Extend {
                env_ids,
                messages,
                tool_results,
            } => {
                let mut open = self
                    .open
                    .take()
                    .expect("an extension has an open trajectory");
                open.append(&env_ids, messages, tool_results);
                open
            }
            Join::New { messages, tools } => {
                if let Some(open) = self.open.take() {
                    self.done.push(self.close(open, model));
                }
                let mut trajectory = Trajectory {
                    sample_id: self.options.sample_id.clone(),
                    chain: self.options.chain,
                    ..Trajectory::default()
                };
                trajectory.push(&prepared.context, None);
                trajectory.prompt_len = prepared.context.len();
                Open {
                    trajectory,
                    messages,
                    tools,
                    ended_by_eot: false,
                }
            }
        };
        let t = &mut open.trajectory;
        let start = t.tokens.len();
        t.push(&generated.ids, Some(&generated.logprobs));
        t.turns.push(Turn {
            start,
            model_end: t.tokens.len(),
            end: t.tokens.len(),
            text: text.to_string(),
            calls: calls
                .iter()
                .map(|(name, arguments)| CallRecord {
                    name: name.clone(),
                    arguments: arguments.clone(),
                    ..CallRecord::default()
                })
                .collect(),
            generate_seconds: seconds,
            tool_seconds: 0.0,
            policy_version: generated.policy_version,
        });
        open.ended_by_eot = generated
            .ids
            .last()
            .is_some_and(|id| model.end_of_turn.contains(id));
        open.messages
            .push(json!({"role": "assistant", "content": text}));
        // A generation that filled the budget ends the trajectory, as a chain's ends: nothing
        // the client adds after it is recorded.
        let budget = self
            .options
            .max_total_tokens
            .unwrap_or(usize::MAX)
            .min(model.context_len);
        if open.trajectory.tokens.len() >= budget {
            self.done.push(self.close(open, model));
            self.spent = true;
        } else {
            self.open = Some(open);
        }
    }

    fn close(&self, open: Open, model: &ChatModel) -> Trajectory {
        let mut t = open.trajectory;
        let last = t.turns.last();
        let full = self
            .options
            .max_total_tokens
            .unwrap_or(usize::MAX)
            .min(model.context_len)
            <= t.tokens.len();
        t.finish_reason = match last {
            _ if full => ChainEnd::Truncated,
            Some(turn) if turn.calls.is_empty() => ChainEnd::NoToolCall,
            _ => ChainEnd::MaxTurns,
        };
        t.response = last.map(|turn| turn.text.clone()).unwrap_or_default();
        t.seconds = self.created.elapsed().as_secs_f64();
        t
    }

    /// Ends the episode with `reward`: every trajectory takes it.
    pub(crate) fn finish(
        &mut self,
        model: &ChatModel,
        reward: f32,
        metrics: BTreeMap<String, f64>,
    ) {
        if let Some(open) = self.open.take() {
            self.done.push(self.close(open, model));
        }
        for t in &mut self.done {
            t.reward = Some(reward);
            t.reward_metrics = metrics.clone();
        }
        self.reward = Some((reward, metrics));
        self.last_used = Instant::now();
    }

    /// The trajectories so far (the open one closed as it stands).
    pub(crate) fn trajectories(&self, model: &ChatModel) -> Vec<Trajectory> {
        let mut all = self.done.clone();
        if let Some(open) = &self.open {
            all.push(self.close(
                Open {
                    trajectory: open.trajectory.clone(),
                    messages: Vec::new(),
                    tools: None,
                    ended_by_eot: open.ended_by_eot,
                },
                model,
            ));
        }
        all
    }

    /// What the session leaves.
    pub(crate) fn into_record(mut self, model: &ChatModel) -> SessionRecord {
        if let Some(open) = self.open.take() {
            self.done.push(self.close(open, model));
        }
        let (reward, metrics) = match self.reward {
            Some((r, m)) => (Some(r), m),
            None => (None, BTreeMap::new()),
        };
        SessionRecord {
            trajectories: self.done,
            reward,
            metrics,
        }
    }
}
