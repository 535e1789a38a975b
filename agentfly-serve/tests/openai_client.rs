//! The endpoint driven by the official `openai` Python client (from PyPI, `.venv-agents`):
//! a two-turn tool-calling episode in a recorded session, non-streaming and streaming; the
//! recorded trajectory's sampled tokens are exactly what the client received, and the whole
//! trajectory is the template's rendering of the conversation. The policy replays scripted
//! turns (SmolLM2's tokenizer and template), so every answer is known.

use agentfly_core::rollout::ScriptedPolicy;
use agentfly_serve::{ChatModel, ServeConfig, Server};
use agentfly_testdata::{agents_python, smollm2_gguf, support::device};
use serde_json::{Value, json};
use std::sync::Arc;

const CALL: &str =
    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>";
const ANSWER: &str = "The sum is 5.";

fn smollm2() -> ChatModel {
    let model = agentfly_model::Pretrained::load(smollm2_gguf(), &device()).unwrap();
    let (tokenizer, template, eos) = model.chat_parts().unwrap();
    ChatModel::new("smollm2", tokenizer, template, eos, 2048).unwrap()
}

#[test]
fn the_openai_client_plays_a_recorded_episode() {
    let model = smollm2();
    let tok = model.tokenizer().clone();
    let call = tok.encode(CALL, false).unwrap();
    let answer = tok.encode(ANSWER, false).unwrap();
    let eot = tok.token_to_id("<|im_end|>").unwrap();
    let script = vec![call.clone(), answer.clone(), call.clone(), answer.clone()];
    let policy = Arc::new(ScriptedPolicy::new(script, eot));
    // The same chat parts, to render the expected conversations.
    let reference = smollm2();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(Server::start(
            model,
            policy.clone(),
            ServeConfig::default(),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let out = std::process::Command::new(agents_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/openai_episode.py"
        ))
        .arg(format!("http://{}", server.addr()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();

    let tools = json!([{"type": "function", "function": {"name": "add", "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]);
    for mode in ["plain", "stream"] {
        let episode = &out[mode];
        let received = episode["received"].as_array().unwrap();
        // Turn 1: the call, as OpenAI's `tool_calls`.
        let first = &received[0];
        assert_eq!(first["finish_reason"], "tool_calls", "{mode}: {first}");
        assert_eq!(first["content"], Value::Null, "{mode}");
        let calls = first["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{mode}");
        assert_eq!(calls[0]["function"]["name"], "add");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"a": 2, "b": 3}));
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
        // `usage` counts every sampled token, the end of the turn included.
        assert_eq!(first["completion_tokens"], call.len() + 1, "{mode}");
        // Turn 2: the answer.
        let second = &received[1];
        assert_eq!(second["content"], ANSWER, "{mode}");
        assert_eq!(second["finish_reason"], "stop", "{mode}");
        assert_eq!(second["completion_tokens"], answer.len() + 1, "{mode}");
        if mode == "plain" {
            let pieces: String = first["logprob_tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            assert_eq!(pieces, CALL, "the logprobs' tokens spell what was sampled");
        }

        // What the server recorded: one trajectory, the two turns joined.
        let trajectories = episode["trajectories"].as_array().unwrap();
        assert_eq!(
            trajectories.len(),
            1,
            "{mode}: the second request extends the first"
        );
        let t = &trajectories[0];
        assert_eq!(t["reward"], 1.0);
        assert_eq!(t["reward_metrics"]["correct"], 1.0);
        assert_eq!(t["turns"].as_array().unwrap().len(), 2);
        let ids: Vec<u32> = serde_json::from_value(t["tokens"].clone()).unwrap();
        let mask: Vec<u8> = serde_json::from_value(t["loss_mask"].clone()).unwrap();
        let logprobs: Vec<f32> = serde_json::from_value(t["logprobs"].clone()).unwrap();
        let sampled: Vec<u32> = ids
            .iter()
            .zip(&mask)
            .filter(|(_, m)| **m == 1)
            .map(|(id, _)| *id)
            .collect();
        let expected: Vec<u32> = [&call[..], &[eot], &answer[..], &[eot]].concat();
        assert_eq!(
            sampled, expected,
            "{mode}: mask 1 exactly on the sampled ids"
        );
        assert!(
            ids.iter()
                .zip(&mask)
                .zip(&logprobs)
                .all(|((_, m), lp)| if *m == 1 { *lp == -0.5 } else { *lp == 0.0 })
        );
        // Turn by turn, the sampled text is what the client received.
        let turn_text = |i: usize| {
            let turn = &t["turns"][i];
            let (start, end) = (
                turn["start"].as_u64().unwrap() as usize,
                turn["model_end"].as_u64().unwrap() as usize,
            );
            tok.decode(&ids[start..end], false).unwrap()
        };
        assert_eq!(turn_text(0), format!("{CALL}<|im_end|>"));
        assert_eq!(turn_text(1), format!("{ANSWER}<|im_end|>"));
        // The whole trajectory is the template's rendering of the conversation, the tool
        // result rendered as the template renders it.
        let conversation = vec![
            json!({"role": "system", "content": "You add numbers."}),
            json!({"role": "user", "content": "What is 2 + 3?"}),
            json!({"role": "assistant", "content": CALL}),
            json!({"role": "tool", "name": "add", "content": "5"}),
            json!({"role": "assistant", "content": ANSWER}),
        ];
        let rendered = reference
            .render(&conversation, tools.as_array().map(Vec::as_slice), false)
            .unwrap();
        let decoded = tok.decode(&ids, false).unwrap();
        assert!(
            rendered.starts_with(&decoded),
            "{mode}:\n{decoded}\n---\n{rendered}"
        );
        assert_eq!(
            rendered[decoded.len()..].trim(),
            "",
            "{mode}: only the last turn's closing newline is left"
        );
        assert!(
            decoded.contains("You add numbers.\n\n# Tools"),
            "SmolLM2's template has no tool syntax: the tools are described"
        );
    }
    assert_eq!(out["models"], json!(["smollm2"]));
    let errors = &out["errors"];
    assert_eq!(errors["temperature"]["status"], 400);
    assert_eq!(errors["temperature"]["param"], "temperature");
    assert_eq!(errors["role"]["param"], "messages[0].role");
    assert_eq!(errors["n"]["status"], 400);
    assert_eq!(errors["n"]["param"], "n");
    assert_eq!(
        errors["ended"], 400,
        "a session whose reward was posted takes no more requests (400: the client retries a 409)"
    );
    assert_eq!(
        errors["huge_reward"], 400,
        "a reward past f32's range is refused"
    );
    assert_eq!(errors["stops"]["param"], "stop");
    assert_eq!(errors["again"], 409);
    assert_eq!(errors["unknown"], 404);
    assert_eq!(errors["bad_reward"], 400);
    assert_eq!(errors["bad_id"], 400);
    assert_eq!(
        policy.requests().len(),
        4,
        "no request that was refused reached the policy"
    );
    runtime.block_on(server.shutdown()).unwrap();
}
