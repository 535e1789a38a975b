//! The three servers' token-id completion APIs: what each request asks for and how each
//! answer becomes sampled ids with their log-probabilities ([`ServerApi`]).
//!
//! Each request asks for exactly the sampling the chain asked for — the prompt as ids,
//! only temperature, top-k and top-p (no min-p, no penalties: a server's defaults, or a
//! model's `generation_config.json` under vLLM, would change the distribution), the stop
//! strings and ids — and for the sampled ids with each one's log-probability. Every server
//! includes the stop id that ended a generation in its ids; a generation is cut here after
//! the first of the request's stop ids as well.
//!
//! What the log-probabilities mean differs, and the trainer's importance weights depend on
//! it (facts read from each server's source):
//! - **llama.cpp** (`POST /completion`, `n_probs: 1`, `post_sampling_probs`): the
//!   probability under the sampling distribution, after temperature, top-k and top-p.
//! - **vLLM** (`POST /v1/completions`, OpenAI-compatible, `logprobs: 0`,
//!   `return_token_ids`, vLLM ≥ 0.10.2): the raw model's log-probabilities unless the
//!   server runs with `--logprobs-mode processed_logprobs`, which gives them after
//!   temperature, top-k and top-p. Run it so for RL at a temperature other than 1.
//! - **SGLang** (`POST /generate` with `input_ids` and `return_logprob`, SGLang ≥ 0.5.1):
//!   after temperature but before top-k and top-p, so exact when those are off (the
//!   jobs' setting). SGLang seeds a request's sampling only under
//!   `--enable-deterministic-inference`; agentfly does not send the seed (servers before
//!   0.5.3 reject the field).

use agentfly_core::rollout::{GenerateRequest, Generated, GenerationEnd};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which server's API a [`super::ServerPolicy`] speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerApi {
    /// llama.cpp's `llama-server`: `POST /completion`.
    #[default]
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// vLLM's OpenAI-compatible server: `POST /v1/completions`.
    Vllm,
    /// SGLang's native server: `POST /generate`.
    Sglang,
}

impl std::str::FromStr for ServerApi {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "llama.cpp" | "llama-cpp" | "llamacpp" => Ok(Self::LlamaCpp),
            "vllm" => Ok(Self::Vllm),
            "sglang" => Ok(Self::Sglang),
            other => Err(format!(
                "unknown server API {other:?}: llama.cpp, vllm or sglang"
            )),
        }
    }
}

impl std::fmt::Display for ServerApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::LlamaCpp => "llama.cpp",
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
        })
    }
}

impl ServerApi {
    /// The path generations are requested at.
    pub fn endpoint(self) -> &'static str {
        match self {
            Self::LlamaCpp => "/completion",
            Self::Vllm => "/v1/completions",
            Self::Sglang => "/generate",
        }
    }

    /// The request body asking for `r`'s sampling; `model` is vLLM's served model name
    /// (optional there, unused by the others).
    pub fn body(self, r: &GenerateRequest, model: Option<&str>) -> Value {
        match self {
            Self::LlamaCpp => json!({
                "prompt": r.context,
                "n_predict": r.max_new_tokens,
                "temperature": r.temperature,
                "top_k": r.top_k,
                "top_p": r.top_p,
                "min_p": 0.0,
                "samplers": ["top_k", "top_p", "temperature"],
                "seed": r.seed,
                "stop": r.stop_strings,
                "n_probs": 1,
                "post_sampling_probs": true,
                "return_tokens": true,
                "cache_prompt": true,
                "stream": false,
            }),
            Self::Vllm => {
                let mut body = json!({
                    "prompt": r.context,
                    "max_tokens": r.max_new_tokens,
                    "temperature": r.temperature,
                    "top_p": r.top_p,
                    // 0 is "off" for vLLM, as for agentfly.
                    "top_k": r.top_k,
                    "min_p": 0.0,
                    "repetition_penalty": 1.0,
                    "presence_penalty": 0.0,
                    "frequency_penalty": 0.0,
                    // vLLM's seed is an int64.
                    "seed": r.seed & (i64::MAX as u64),
                    "stop": r.stop_strings,
                    "stop_token_ids": r.stop_ids,
                    "include_stop_str_in_output": true,
                    "skip_special_tokens": false,
                    "logprobs": 0,
                    "return_tokens_as_token_ids": true,
                    "return_token_ids": true,
                    "stream": false,
                });
                if let Some(model) = model {
                    body["model"] = json!(model);
                }
                body
            }
            Self::Sglang => json!({
                "input_ids": r.context,
                "sampling_params": {
                    "max_new_tokens": r.max_new_tokens,
                    "temperature": r.temperature,
                    "top_p": r.top_p,
                    // SGLang's "off" is -1; 0 is refused.
                    "top_k": if r.top_k == 0 { -1 } else { r.top_k as i64 },
                    "min_p": 0.0,
                    "stop": r.stop_strings,
                    "stop_token_ids": r.stop_ids,
                    "skip_special_tokens": false,
                    "no_stop_trim": true,
                },
                "return_logprob": true,
                "logprob_start_len": -1,
                "top_logprobs_num": 0,
                "stream": false,
            }),
        }
    }

    /// The generation in an answer, cut after the first of `stop_ids`.
    pub fn parse(self, answer: &Value, stop_ids: &[u32]) -> Result<Generated, String> {
        let (tokens, logprobs, end) = match self {
            Self::LlamaCpp => llama_cpp(answer)?,
            Self::Vllm => vllm(answer)?,
            Self::Sglang => sglang(answer)?,
        };
        Ok(cut(tokens, logprobs, end, stop_ids))
    }

    /// What an error answer says.
    pub fn error_message(self, answer: &Value) -> String {
        let error = &answer["error"];
        match error {
            Value::Null => match &answer["message"] {
                Value::Null => answer.to_string().chars().take(300).collect(),
                m => m.to_string(),
            },
            Value::Object(o) if o.contains_key("message") => o["message"].to_string(),
            other => other.to_string(),
        }
    }
}

/// The sampled ids, their log-probabilities and why the server stopped.
type Answer = (Vec<u32>, Vec<f32>, GenerationEnd);

fn token_id(token: &Value) -> Result<u32, String> {
    token
        .as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| format!("token {token} is not an id"))
}

fn llama_cpp(answer: &Value) -> Result<Answer, String> {
    let tokens = answer["tokens"]
        .as_array()
        .ok_or("the answer has no `tokens` (a llama.cpp server older than `return_tokens`?)")?;
    let probs = answer["completion_probabilities"]
        .as_array()
        .ok_or("the answer has no `completion_probabilities`")?;
    if answer["truncated"] == true {
        // The slot's context ran out before the request's budget: what follows would be
        // conditioned on a context the server no longer holds.
        return Err(format!(
            "the server's context ran out after {} tokens (`truncated`): give its \
             `rollout.llama_server.context` (llama.cpp's --ctx-size) more room than \
             `chain.max_total_tokens`",
            answer["tokens_evaluated"].as_u64().unwrap_or(0) + tokens.len() as u64
        ));
    }
    let stop_word = answer["stop_type"] == "word";
    // On a stop string llama.cpp's server drops the probabilities of the stop string's
    // tokens but returns the tokens: those are not the model's to keep (nothing says how
    // they were sampled), so the generation ends before them.
    let tokens = if stop_word && probs.len() < tokens.len() {
        &tokens[..probs.len()]
    } else {
        &tokens[..]
    };
    if probs.len() < tokens.len() {
        // llama.cpp's server records a token's probability only once the text generated so
        // far ends on a whole UTF-8 character: a token that ends inside one (part of an
        // emoji or a CJK character) gets none, and which one it was cannot be told from
        // the ids alone.
        return Err(format!(
            "the answer has {} tokens but {} probabilities: llama.cpp's server gives none \
             for a token that ends inside a UTF-8 character, so this generation's \
             log-probabilities are unknown",
            tokens.len(),
            probs.len()
        ));
    }
    if probs.len() != tokens.len() {
        return Err(format!(
            "the answer has {} tokens but {} probabilities",
            tokens.len(),
            probs.len()
        ));
    }
    let end = match answer["stop_type"].as_str() {
        Some("eos" | "word") => GenerationEnd::Stop,
        Some("limit") => GenerationEnd::Length,
        other => return Err(format!("unexpected stop_type {other:?}")),
    };
    let (mut ids, mut logprobs) = (Vec::new(), Vec::new());
    for (token, prob) in tokens.iter().zip(probs) {
        let id = token_id(token)?;
        if prob["id"].as_u64().is_some_and(|p| p != u64::from(id)) {
            return Err(format!(
                "the probability of token {id} is for {}",
                prob["id"]
            ));
        }
        let p = prob["prob"]
            .as_f64()
            .ok_or_else(|| format!("no probability for token {id}: {prob}"))?;
        ids.push(id);
        logprobs.push(p.ln() as f32);
    }
    Ok((ids, logprobs, end))
}

fn vllm(answer: &Value) -> Result<Answer, String> {
    let choice = &answer["choices"][0];
    if choice.is_null() {
        return Err("the answer has no `choices`".into());
    }
    let logprobs = &choice["logprobs"];
    let values = logprobs["token_logprobs"]
        .as_array()
        .ok_or("the answer has no `logprobs.token_logprobs` (was `logprobs` dropped?)")?;
    // `token_ids` (vLLM ≥ 0.10.2); before it, the ids are in the tokens as "token_id:N".
    let ids: Vec<u32> = match choice["token_ids"].as_array() {
        Some(ids) => ids.iter().map(token_id).collect::<Result<_, _>>()?,
        None => logprobs["tokens"]
            .as_array()
            .ok_or("the answer has neither `token_ids` nor `logprobs.tokens`")?
            .iter()
            .map(|t| {
                t.as_str()
                    .and_then(|t| t.strip_prefix("token_id:"))
                    .and_then(|id| id.parse().ok())
                    .ok_or_else(|| {
                        format!("token {t} is not \"token_id:N\" (return_tokens_as_token_ids)")
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    if values.len() != ids.len() {
        return Err(format!(
            "the answer has {} tokens but {} log-probabilities",
            ids.len(),
            values.len()
        ));
    }
    let logprobs = ids
        .iter()
        .zip(values)
        .map(|(id, v)| {
            v.as_f64()
                .map(|v| v as f32)
                .ok_or_else(|| format!("no log-probability for token {id}: {v}"))
        })
        .collect::<Result<_, _>>()?;
    let end = match choice["finish_reason"].as_str() {
        Some("stop") => GenerationEnd::Stop,
        Some("length") => GenerationEnd::Length,
        other => return Err(format!("unexpected finish_reason {other:?}")),
    };
    Ok((ids, logprobs, end))
}

fn sglang(answer: &Value) -> Result<Answer, String> {
    let meta = &answer["meta_info"];
    let entries = meta["output_token_logprobs"].as_array().ok_or(
        "the answer has no `meta_info.output_token_logprobs` (was `return_logprob` dropped?)",
    )?;
    let (mut ids, mut logprobs) = (Vec::new(), Vec::new());
    for entry in entries {
        let id = token_id(&entry[1])?;
        let lp = entry[0]
            .as_f64()
            .ok_or_else(|| format!("no log-probability for token {id}: {entry}"))?;
        ids.push(id);
        logprobs.push(lp as f32);
    }
    // `output_ids` (SGLang ≥ 0.5.1) must be the same tokens.
    if let Some(output) = answer["output_ids"].as_array() {
        let output: Vec<u32> = output.iter().map(token_id).collect::<Result<_, _>>()?;
        if output != ids {
            return Err(format!(
                "`output_ids` ({} tokens) are not the tokens of `output_token_logprobs` ({})",
                output.len(),
                ids.len()
            ));
        }
    }
    let finish = &meta["finish_reason"];
    let end = match finish["type"].as_str() {
        Some("stop") => GenerationEnd::Stop,
        Some("length") => GenerationEnd::Length,
        Some("abort") => return Err(format!("the server aborted the request: {finish}")),
        _ => return Err(format!("unexpected finish_reason {finish}")),
    };
    Ok((ids, logprobs, end))
}

/// The generation cut after the first of `stop_ids`.
fn cut(
    mut ids: Vec<u32>,
    mut logprobs: Vec<f32>,
    mut end: GenerationEnd,
    stop_ids: &[u32],
) -> Generated {
    if let Some(i) = ids.iter().position(|id| stop_ids.contains(id)) {
        ids.truncate(i + 1);
        logprobs.truncate(i + 1);
        end = GenerationEnd::Stop;
    }
    Generated {
        ids,
        logprobs,
        end,
        policy_version: 0,
    }
}

#[cfg(test)]
mod tests;
