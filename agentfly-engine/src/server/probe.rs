//! Checking which weights a server serves. A policy version is a label the trainer
//! attaches; a server restarted by its supervisor serves its launch weights under the
//! current label. So after each push every server scores a fixed probe — a few hundred
//! tokens of text — and its log-probabilities are compared with the trainer's for the
//! weights it pushed: too far apart (or nearer the weights before), and the push fails
//! with the difference.

use super::ServerApi;
use serde_json::{Value, json};

/// What every server must score alike after a push: the probe's ids and the trainer's
/// log-probability of each id after the first given those before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The probe's token ids.
    pub ids: Vec<u32>,
    /// `log p(ids[i + 1] | ids[..=i])` under the pushed weights.
    pub logprobs: Vec<f32>,
}

/// The probe's text: ordinary English, so that its tokens are likely ones (where a
/// server's lower precision moves log-probabilities least).
pub const PROBE_TEXT: &str = "The history of the town begins with a small market on the \
river, where farmers from the hills sold grain, wool and cheese to the boatmen who carried \
them down to the coast. In the spring of each year the river rose, and the lower streets \
were flooded for a week or two, so the oldest houses stand on stone steps above the road. \
A bridge was built in the twelfth century, and a church soon after it; both are still in \
use. The railway came in 1852 and brought a mill, a school and a newspaper, which printed \
the prices of the market every Friday. Today about nine thousand people live there. Most \
of them work in the city an hour away, but the market is still held on Saturday mornings, \
and in the summer visitors come to walk along the river and to see the old bridge. The \
museum in the former mill tells the story of the town with maps, tools and photographs, \
and its small garden has a view of the hills where the grain was grown.";

/// How far a server's log-probabilities are from the expected ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distance {
    /// Mean absolute difference over the probe's positions.
    pub mean: f32,
    /// Largest absolute difference.
    pub max: f32,
}

impl std::fmt::Display for Distance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mean |Δ log p| {:.4}, max {:.4}", self.mean, self.max)
    }
}

/// The distance between two runs of log-probabilities of the same positions.
pub fn distance(a: &[f32], b: &[f32]) -> Distance {
    let n = a.len().min(b.len()).max(1) as f32;
    let diffs = a.iter().zip(b).map(|(x, y)| (x - y).abs());
    let (sum, max) = diffs.fold((0.0f32, 0.0f32), |(s, m), d| (s + d, m.max(d)));
    Distance { mean: sum / n, max }
}

/// Whether a server scored the probe as the pushed weights do: within `tolerance` (mean
/// absolute difference), and nearer them than the weights served before (`previous`, when
/// the two differ by more than the tolerance). Else why not.
pub fn judge(
    server: &[f32],
    pushed: &[f32],
    previous: Option<&[f32]>,
    tolerance: f32,
) -> Result<Distance, String> {
    if server.len() != pushed.len() {
        return Err(format!(
            "it scored {} of the probe's {} positions",
            server.len(),
            pushed.len()
        ));
    }
    let to_pushed = distance(server, pushed);
    // NaN (a server that scored nonsense) fails too.
    if to_pushed.mean.is_nan() || to_pushed.mean > tolerance {
        return Err(format!(
            "its log-probabilities of the probe are not the pushed weights' ({to_pushed}; \
             the tolerance is {tolerance})"
        ));
    }
    if let Some(previous) = previous.filter(|p| distance(p, pushed).mean > tolerance) {
        let to_previous = distance(server, previous);
        if to_previous.mean < to_pushed.mean {
            return Err(format!(
                "it scores the probe as the weights served before this push do ({to_previous}; \
                 the pushed ones: {to_pushed})"
            ));
        }
    }
    Ok(to_pushed)
}

impl ServerApi {
    /// The path and body that ask a server for the log-probabilities of `ids`' tokens
    /// given those before them; `None` for llama.cpp's server, which cannot score a
    /// prompt (the trainer runs those itself, on the file it wrote).
    pub fn score_request(self, ids: &[u32], model: Option<&str>) -> Option<(&'static str, Value)> {
        match self {
            Self::LlamaCpp => None,
            Self::Vllm => {
                let mut body = json!({
                    "prompt": ids,
                    "max_tokens": 1,
                    "temperature": 1.0,
                    "prompt_logprobs": 0,
                });
                if let Some(model) = model {
                    body["model"] = json!(model);
                }
                Some(("/v1/completions", body))
            }
            Self::Sglang => Some((
                "/generate",
                json!({
                    "input_ids": ids,
                    "sampling_params": {"max_new_tokens": 1, "temperature": 1.0},
                    "return_logprob": true,
                    "logprob_start_len": 0,
                }),
            )),
        }
    }

    /// The log-probabilities of `ids[1..]` in a server's answer to
    /// [`ServerApi::score_request`].
    pub fn parse_score(self, answer: &Value, ids: &[u32]) -> Result<Vec<f32>, String> {
        let entries = match self {
            Self::LlamaCpp => return Err("llama.cpp's server scores no prompts".into()),
            Self::Vllm => answer["choices"][0]["prompt_logprobs"].as_array(),
            Self::Sglang => answer["meta_info"]["input_token_logprobs"].as_array(),
        }
        .ok_or_else(|| format!("the answer has no prompt log-probabilities: {answer}"))?;
        if entries.len() < ids.len() {
            return Err(format!(
                "{} prompt log-probabilities for {} tokens",
                entries.len(),
                ids.len()
            ));
        }
        // The first token has none (nothing comes before it).
        ids.iter()
            .zip(entries)
            .skip(1)
            .map(|(id, entry)| {
                let value = match self {
                    Self::Vllm => &entry[id.to_string()]["logprob"],
                    _ => {
                        if entry[1].as_u64().is_some_and(|e| e != u64::from(*id)) {
                            return Err(format!(
                                "a log-probability for {} at {id}'s place",
                                entry[1]
                            ));
                        }
                        &entry[0]
                    }
                };
                value
                    .as_f64()
                    .map(|v| v as f32)
                    .ok_or_else(|| format!("no log-probability for token {id}: {entry}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_judged_by_its_distance_to_the_pushed_weights() {
        let pushed = [-1.0, -2.0, -0.5];
        let before = [-3.0, -1.0, -2.5];
        // Within the tolerance: fine.
        assert!(judge(&[-1.01, -2.02, -0.5], &pushed, Some(&before), 0.05).is_ok());
        // Still the earlier weights (a restarted server): refused, saying how far.
        let err = judge(&before, &pushed, Some(&before), 0.05).unwrap_err();
        assert!(err.contains("mean |Δ log p| 1.6667, max 2.0000"), "{err}");
        // Within a loose tolerance but nearer the weights before the push: refused too.
        let near = [-1.6, -2.6, -1.1];
        let nearer_before = [-1.35, -2.35, -0.85];
        let err = judge(&nearer_before, &pushed, Some(&near), 0.5).unwrap_err();
        assert!(err.contains("weights served before"), "{err}");
        // ... unless the push moved the probe less than the tolerance (noise decides).
        assert!(judge(&nearer_before, &pushed, Some(&near), 0.7).is_ok());
        let err = judge(&before, &pushed, None, 0.05).unwrap_err();
        assert!(err.contains("mean |Δ log p| 1.6667, max 2.0000"), "{err}");
        assert!(judge(&[f32::NAN; 3], &pushed, None, 0.05).is_err());
        assert!(judge(&[-1.0], &pushed, None, 0.05).is_err());
    }

    #[test]
    fn vllm_and_sglang_prompt_log_probabilities_are_read() {
        let ids = [5, 7, 9];
        let vllm = json!({"choices": [{"prompt_logprobs": [
            null,
            {"7": {"logprob": -1.5, "rank": 3}, "2": {"logprob": -0.1, "rank": 1}},
            {"9": {"logprob": -0.25, "rank": 1}},
        ]}]});
        assert_eq!(
            ServerApi::Vllm.parse_score(&vllm, &ids).unwrap(),
            [-1.5, -0.25]
        );
        let sglang = json!({"meta_info": {"input_token_logprobs": [
            [null, 5, null], [-1.5, 7, null], [-0.25, 9, null],
        ]}});
        assert_eq!(
            ServerApi::Sglang.parse_score(&sglang, &ids).unwrap(),
            [-1.5, -0.25]
        );
        let shifted = json!({"meta_info": {"input_token_logprobs": [[null, 5], [-1.5, 8]]}});
        assert!(ServerApi::Sglang.parse_score(&shifted, &ids).is_err());
        assert!(ServerApi::Vllm.parse_score(&json!({}), &ids).is_err());
        let (path, body) = ServerApi::Vllm.score_request(&ids, Some("m")).unwrap();
        assert_eq!(
            (path, &body["prompt_logprobs"], &body["model"]),
            ("/v1/completions", &json!(0), &json!("m"))
        );
        assert!(ServerApi::LlamaCpp.score_request(&ids, None).is_none());
    }
}
