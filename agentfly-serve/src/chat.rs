//! One chat completion: the request read and checked, its context (recorded or not), the
//! generation on a bounded slot, the reply as OpenAI shapes it — whole or as server-sent
//! events.

use crate::ApiError;
use crate::model::read_reply;
use crate::request::{ChatRequest, Limits};
use crate::session::{Prepared, Session};
use crate::state::{Inner, since};
use agentfly_core::rollout::{GenerateRequest, Generated, GenerationEnd};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One choice, read.
struct Choice {
    content: Option<String>,
    calls: Vec<Value>,
    finish: &'static str,
    logprobs: Option<Value>,
}

/// Serves one request, recorded in `session` when given.
pub(crate) async fn complete(
    inner: &Inner,
    session: Option<Arc<tokio::sync::Mutex<Session>>>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let request = ChatRequest::parse(body)?;
    request.check(Limits {
        max_n: inner.config.max_n.min(inner.config.max_concurrent.max(1)),
    })?;
    let model = &inner.model;
    let messages = model.template_messages(&request.messages);
    let tools = request.tools.clone().filter(|t| !t.is_empty());
    let n = request.n.unwrap_or(1);
    // A session's requests run one at a time: each extends what the one before recorded.
    let mut guard = match &session {
        Some(s) => Some(s.lock().await),
        None => None,
    };
    let (prepared, fixed, budget, turn) = match guard.as_deref() {
        Some(s) => {
            // (400, not 409: OpenAI's clients retry a 409.)
            if s.ended() {
                return Err(ApiError::BadRequest {
                    message: format!("session {:?} has ended: its reward was posted", s.id),
                    param: None,
                    code: Some("session_ended"),
                });
            }
            if s.spent {
                return Err(ApiError::BadRequest {
                    message: "the episode's turns or tokens are spent: post its reward".into(),
                    param: None,
                    code: Some("episode_spent"),
                });
            }
            let cap = inner.config.max_session_trajectories;
            if s.count() >= cap {
                return Err(ApiError::BadRequest {
                    message: format!(
                        "session {:?} holds {cap} trajectories, the most this server keeps for one \
                         session: post its reward or DELETE it",
                        s.id
                    ),
                    param: None,
                    code: Some("session_full"),
                });
            }
            if n > 1 {
                return Err(ApiError::bad(
                    "n",
                    "a recorded session samples one choice per request (`n` 1)",
                ));
            }
            let budget = s.options.max_total_tokens.unwrap_or(usize::MAX);
            (
                s.prepare(model, messages, tools.clone())?,
                s.options.sampling.clone(),
                budget,
                s.turns,
            )
        }
        None => {
            let text = model.render(&messages, tools.as_deref(), true)?;
            (
                Prepared::unrecorded(model.encode(&text)?),
                None,
                usize::MAX,
                0,
            )
        }
    };
    let budget = budget.min(model.context_len);
    let room = budget.saturating_sub(prepared.context.len());
    // A request past the episode's turns or tokens is refused, and what the client added
    // (the last observation) recorded, as a chain ends.
    if let Some(max) = guard.as_deref().and_then(|s| s.options.max_turns)
        && turn >= max
    {
        if let Some(session) = guard.as_deref_mut() {
            session.record_added(model, prepared);
        }
        return Err(ApiError::BadRequest {
            message: format!("the episode has used its {max} model turns: post its reward"),
            param: None,
            code: Some("max_turns_exceeded"),
        });
    }
    if room == 0 {
        let len = prepared.context.len();
        if let Some(session) = guard.as_deref_mut() {
            session.record_added(model, prepared);
        }
        return Err(ApiError::BadRequest {
            message: format!(
                "the conversation is {len} tokens, and this {} holds {budget}",
                if budget == model.context_len {
                    "model's context"
                } else {
                    "episode's budget"
                },
            ),
            param: Some("messages".into()),
            code: Some("context_length_exceeded"),
        });
    }
    let (temperature, top_p, top_k, max_tokens, seed) = match &fixed {
        Some(f) => (
            f.temperature,
            f.top_p,
            f.top_k,
            f.max_tokens,
            f.seed.wrapping_mul(1_000_003).wrapping_add(turn as u64),
        ),
        None => (
            request.temperature.unwrap_or(1.0),
            request.top_p.unwrap_or(1.0),
            request.top_k.unwrap_or(0),
            request
                .max_tokens()
                .unwrap_or(inner.config.default_max_tokens),
            request.seed.map_or_else(|| fresh_seed(inner), |s| s as u64),
        ),
    };
    // Under the run's fixed sampling the client's stop strings are not applied either: a reply
    // cut short would not be what the model sampled, and the session could not join it.
    let stop_strings = match fixed {
        Some(_) => Vec::new(),
        None => request.stop_strings(),
    };
    let wait = inner.config.queue_wait;
    let permit = tokio::time::timeout(wait, inner.slots.acquire_many(n as u32))
        .await
        .map_err(|_| {
            ApiError::Busy(format!(
                "no generation slot freed within {} s: try again later",
                wait.as_secs()
            ))
        })?
        .map_err(|_| ApiError::Busy("the server is stopping".into()))?;
    let start = Instant::now();
    let generations = futures_util::future::join_all((0..n).map(|i| {
        inner.policy.generate(GenerateRequest {
            context: prepared.context.clone(),
            max_new_tokens: max_tokens.min(room),
            stop_ids: model.end_of_turn.clone(),
            stop_strings: stop_strings.clone(),
            temperature,
            top_p,
            top_k,
            seed: seed.wrapping_add(i as u64),
        })
    }))
    .await;
    drop(permit);
    let seconds = since(start);
    let generations = generations
        .into_iter()
        .collect::<Result<Vec<Generated>, _>>()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let prompt_tokens = prepared.context.len();
    let mut choices = Vec::with_capacity(n);
    let mut recorded = None;
    for generated in &generations {
        let (text, choice, calls) = read_choice(inner, &request, generated, &stop_strings);
        if recorded.is_none() {
            recorded = Some((text, calls));
        }
        choices.push(choice);
    }
    if let (Some(session), Some((text, calls))) = (guard.as_deref_mut(), recorded) {
        session.record(model, prepared, &generations[0], &text, &calls, seconds);
    }
    drop(guard);
    let completion_tokens: usize = generations.iter().map(|g| g.ids.len()).sum();
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    let id = format!(
        "chatcmpl-{:x}{:08x}",
        inner.started,
        inner.ids.fetch_add(1, Ordering::Relaxed)
    );
    let created = now();
    if request.stream == Some(true) {
        let include_usage = request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        return Ok(stream(
            &id,
            created,
            &model.name,
            &choices,
            include_usage.then_some(usage),
        ));
    }
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let mut message = json!({"role": "assistant", "content": c.content});
            if !c.calls.is_empty() {
                message["tool_calls"] = Value::Array(c.calls.clone());
            }
            json!({"index": index, "message": message, "logprobs": c.logprobs, "finish_reason": c.finish})
        })
        .collect();
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model.name,
        "choices": choices,
        "usage": usage,
    });
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response())
}

/// Reads one generation: the text the model wrote (its end-of-turn id left out), the
/// choice as the client gets it, and the calls read.
fn read_choice(
    inner: &Inner,
    request: &ChatRequest,
    generated: &Generated,
    stop_strings: &[String],
) -> (String, Choice, Vec<(String, Value)>) {
    let model = &inner.model;
    let ended_by_eot = generated
        .ids
        .last()
        .is_some_and(|id| model.end_of_turn.contains(id));
    let body = if ended_by_eot {
        &generated.ids[..generated.ids.len() - 1]
    } else {
        &generated.ids[..]
    };
    let text = model.tokenizer.decode(body, false).unwrap_or_default();
    // OpenAI leaves a stop string out of the content.
    let mut shown = text.as_str();
    let mut stopped = false;
    if generated.end == GenerationEnd::Stop
        && let Some(at) = stop_strings
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
    {
        shown = &text[..at];
        stopped = true;
    }
    let reply = read_reply(shown, request.tools_on());
    let mut finish = if ended_by_eot || stopped || generated.end == GenerationEnd::Stop {
        "stop"
    } else {
        "length"
    };
    let calls: Vec<Value> = reply
        .calls
        .iter()
        .map(|(name, arguments)| {
            let id = format!("call_{:x}{:06x}", inner.started, inner.ids.fetch_add(1, Ordering::Relaxed));
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    if let Some(first) = calls.first() {
        model.remember(first["id"].as_str().unwrap_or_default(), &text);
        finish = "tool_calls";
    }
    let logprobs = (request.logprobs == Some(true)).then(|| {
        let content: Vec<Value> = body
            .iter()
            .zip(&generated.logprobs)
            .map(|(&id, &lp)| {
                let token = model.tokenizer.decode(&[id], false).unwrap_or_default();
                json!({"token": token, "logprob": lp, "bytes": token.as_bytes(), "top_logprobs": [], "id": id})
            })
            .collect();
        json!({"content": content})
    });
    let choice = Choice {
        content: reply.content,
        calls,
        finish,
        logprobs,
    };
    (text, choice, reply.calls)
}

/// The reply as server-sent events: the role, the content, the calls, the finish reason
/// per choice, then the usage (when asked) and `[DONE]`.
fn stream(
    id: &str,
    created: u64,
    model: &str,
    choices: &[Choice],
    usage: Option<Value>,
) -> Response {
    let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices});
    let mut events = Vec::new();
    for (index, c) in choices.iter().enumerate() {
        events.push(chunk(json!([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}])));
        if let Some(content) = &c.content {
            events.push(chunk(json!([{"index": index, "delta": {"content": content}, "logprobs": c.logprobs, "finish_reason": null}])));
        }
        if !c.calls.is_empty() {
            let calls: Vec<Value> = c
                .calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let mut call = call.clone();
                    call["index"] = i.into();
                    call
                })
                .collect();
            events.push(chunk(json!([{"index": index, "delta": {"tool_calls": calls}, "logprobs": null, "finish_reason": null}])));
        }
        events.push(chunk(
            json!([{"index": index, "delta": {}, "logprobs": null, "finish_reason": c.finish}]),
        ));
    }
    if let Some(usage) = usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        events.push(last);
    }
    let mut events: Vec<Result<Event, std::convert::Infallible>> = events
        .into_iter()
        .map(|e| Ok(Event::default().data(e.to_string())))
        .collect();
    events.push(Ok(Event::default().data("[DONE]")));
    Sse::new(futures_util::stream::iter(events)).into_response()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A seed for a request that gives none.
fn fresh_seed(inner: &Inner) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos
        ^ inner
            .ids
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
