//! Chains with a scripted policy through the real code path, on Qwen3's tokenizer and chat
//! template (fixtures): the loss mask is 1 exactly on sampled ids, decoding a trajectory
//! gives the template's rendering, malformed and unknown calls and timeouts become error
//! observations, budgets truncate, and the per-turn rows rebuild the whole trajectory.

mod common;

use agentfly_core::chat::{ChatTemplate, Conversation, Tokenizer};
use agentfly_core::rollout::format::Hermes;
use agentfly_core::rollout::{ChainConfig, ChainEnd, ChainSetup, ScriptedPolicy, Trajectory};
use agentfly_core::{CallContext, Rewards, Sample, Toolbox, reward, tool};
use serde_json::json;

/// Adds two integers.
#[tool]
fn add_numbers(
    /// First.
    a: i64,
    /// Second.
    b: i64,
) -> String {
    (a + b).to_string()
}

/// Submits the final answer.
#[tool(terminal)]
fn submit(
    /// The answer.
    answer: String,
) -> String {
    format!("submitted {answer}")
}

/// Never finishes in time.
#[tool(timeout_ms = 50)]
async fn slow() -> String {
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    "late".into()
}

/// Adds 2 and 3 by calling `add_numbers`, as code-as-action's functions do; with
/// `submit_too`, also submits the sum.
#[tool]
async fn delegate(
    ctx: &mut CallContext,
    /// Also submit the sum.
    submit_too: bool,
) -> String {
    let mut bridge = ctx.bridge("delegate", Default::default());
    let sum = bridge.call("add_numbers", json!({"a": 2, "b": 3})).await;
    if submit_too {
        bridge.call("submit", json!({"answer": sum.text})).await;
    }
    format!("delegated: {}", sum.text)
}

static ARRIVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Waits (up to 5 s) for a second caller: "met" when one came, "alone" when not.
#[tool]
async fn meet() -> String {
    use std::sync::atomic::Ordering;
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    for _ in 0..500 {
        if ARRIVED.load(Ordering::SeqCst) >= 2 {
            return "met".into();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    "alone".into()
}

/// 1 when the response is the sample's answer.
#[reward]
fn right_answer(response: &str, answer: String) -> f32 {
    f32::from(u8::from(response.trim() == answer))
}

struct Fixture {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    eot: u32,
    toolbox: Toolbox,
    rewards: Rewards,
}

fn fixture() -> Fixture {
    let (tokenizer, template, eot) = common::qwen3();
    Fixture {
        tokenizer,
        template,
        eot,
        toolbox: Toolbox::from_names(&["add_numbers", "submit", "slow", "meet"]).unwrap(),
        rewards: Rewards::from_names(&["right_answer"]).unwrap(),
    }
}

async fn run(f: &Fixture, script: &[&str], config: &ChainConfig) -> (Trajectory, ScriptedPolicy) {
    let turns = script
        .iter()
        .map(|t| f.tokenizer.encode(t, false).unwrap())
        .collect();
    let policy = ScriptedPolicy::new(turns, f.eot);
    let setup = ChainSetup {
        policy: &policy,
        toolbox: &f.toolbox,
        format: &Hermes,
        template: &f.template,
        tokenizer: &f.tokenizer,
        end_of_turn: &[f.eot],
        rewards: Some((&f.rewards, "right_answer")),
        config,
    };
    let sample = Sample::new("q1", json!({"question": "What is 2 + 3?", "answer": "5"}));
    let trajectory = setup.run(&sample, 0, 7, CallContext::new()).await;
    (trajectory, policy)
}

fn check_mask(t: &Trajectory, f: &Fixture, script: &[&str]) {
    assert_eq!(t.tokens.len(), t.loss_mask.len());
    assert_eq!(t.tokens.len(), t.logprobs.len());
    let mut sampled = 0;
    for (turn, text) in t.turns.iter().zip(script) {
        let mut expected = f.tokenizer.encode(text, false).unwrap();
        expected.push(f.eot);
        assert_eq!(&t.tokens[turn.start..turn.model_end], &expected[..]);
        assert!(
            t.loss_mask[turn.start..turn.model_end]
                .iter()
                .all(|&m| m == 1)
        );
        assert!(
            t.loss_mask[turn.model_end..turn.end]
                .iter()
                .all(|&m| m == 0)
        );
        assert!(
            t.logprobs[turn.model_end..turn.end]
                .iter()
                .all(|&l| l == 0.0)
        );
        sampled += expected.len();
    }
    assert_eq!(t.sampled_tokens(), sampled, "mask 1 exactly on sampled ids");
    assert!(t.loss_mask[..t.prompt_len].iter().all(|&m| m == 0));
    // The per-turn rows rebuild the trajectory.
    let mut rebuilt = t.tokens[..t.prompt_len].to_vec();
    for row in t.turn_rows() {
        assert_eq!(row.context, &rebuilt[..]);
        rebuilt.extend_from_slice(row.tokens);
    }
    assert_eq!(rebuilt, t.tokens);
}

#[tokio::test]
async fn a_tool_then_an_answer() {
    let f = fixture();
    let script = [
        "<tool_call>\n{\"name\": \"add_numbers\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"submit\", \"arguments\": {\"answer\": \"5\"}}\n</tool_call>",
    ];
    let (t, policy) = run(&f, &script, &ChainConfig::default()).await;
    assert_eq!(t.finish_reason, ChainEnd::Answered, "{:?}", t.error);
    assert_eq!((t.response.as_str(), t.reward), ("5", Some(1.0)));
    assert_eq!(t.turns.len(), 2);
    assert_eq!(t.turns[0].calls[0].observation, "5");
    assert_eq!(t.turns[1].calls[0].name, "submit");
    check_mask(&t, &f, &script);

    // Decoding gives the template's rendering of the same conversation.
    let conversation = Conversation {
        messages: vec![
            json!({"role": "user", "content": "What is 2 + 3?"}),
            json!({"role": "assistant", "content": script[0]}),
            json!({"role": "tool", "name": "add_numbers", "content": "5"}),
        ],
        tools: Some(f.toolbox.schemas()),
        add_generation_prompt: true,
        ..Conversation::default()
    };
    let expected = format!(
        "{}{}<|im_end|>",
        f.template.render(&conversation).unwrap(),
        script[1]
    );
    assert_eq!(f.tokenizer.decode(&t.tokens, false).unwrap(), expected);
    // The second request's context was the whole first turn.
    let requests = policy.requests();
    assert_eq!(requests[1].context, t.tokens[..t.turns[1].start]);

    // The same conversation as a demonstration (SFT) is token for token the trajectory.
    let mut messages = conversation.messages.clone();
    messages.push(json!({"role": "assistant", "content": script[1]}));
    let (tokens, mask) = agentfly_core::rollout::demonstration(
        &f.template,
        &f.tokenizer,
        &messages,
        Some(f.toolbox.schemas()),
        f.eot,
    )
    .unwrap();
    assert_eq!(tokens, t.tokens);
    assert_eq!(mask, t.loss_mask);
}

#[tokio::test]
async fn calls_made_from_inside_a_tool_are_recorded_and_can_answer() {
    let mut f = fixture();
    f.toolbox = Toolbox::from_names(&["delegate", "add_numbers", "submit"]).unwrap();
    let script = [
        "<tool_call>\n{\"name\": \"delegate\", \"arguments\": {\"submit_too\": false}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"delegate\", \"arguments\": {\"submit_too\": true}}\n</tool_call>",
    ];
    let (t, _) = run(&f, &script, &ChainConfig::default()).await;
    assert_eq!(t.finish_reason, ChainEnd::Answered, "{:?}", t.error);
    assert_eq!((t.response.as_str(), t.reward), ("5", Some(1.0)));
    let calls: Vec<(&str, Option<&str>)> = t
        .calls()
        .map(|c| (c.name.as_str(), c.via.as_deref()))
        .collect();
    assert_eq!(
        calls,
        [
            ("delegate", None),
            ("add_numbers", Some("delegate")),
            ("delegate", None),
            ("add_numbers", Some("delegate")),
            ("submit", Some("delegate")),
        ]
    );
    check_mask(&t, &f, &script);
    // The model read only its own call's result: one tool message after the first turn.
    let conversation = Conversation {
        messages: vec![
            json!({"role": "user", "content": "What is 2 + 3?"}),
            json!({"role": "assistant", "content": script[0]}),
            json!({"role": "tool", "name": "delegate", "content": "delegated: 5"}),
        ],
        tools: Some(f.toolbox.schemas()),
        add_generation_prompt: true,
        ..Conversation::default()
    };
    let first_two_turns = f
        .tokenizer
        .decode(&t.tokens[..t.turns[1].start], false)
        .unwrap();
    assert_eq!(first_two_turns, f.template.render(&conversation).unwrap());
}

#[tokio::test]
async fn malformed_unknown_and_timed_out_calls_are_observations() {
    let f = fixture();
    let script = [
        "<tool_call>{bad json here</tool_call>\n<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"slow\", \"arguments\": {}}</tool_call>",
        "The answer is 5.",
    ];
    let (t, _) = run(&f, &script, &ChainConfig::default()).await;
    assert_eq!(t.finish_reason, ChainEnd::NoToolCall);
    assert_eq!(
        (t.response.as_str(), t.reward),
        ("The answer is 5.", Some(0.0))
    );
    let calls = &t.turns[0].calls;
    let errors: Vec<_> = calls.iter().map(|c| c.error.as_deref().unwrap()).collect();
    assert_eq!(errors, ["parse error", "unknown tool", "timed out"]);
    assert!(
        calls[0]
            .observation
            .starts_with("Error: the tool call could not be read: the tool call is not valid JSON")
    );
    assert!(
        calls[1].observation.contains("no tool named `nope`"),
        "{}",
        calls[1].observation
    );
    check_mask(&t, &f, &script);
    // The model saw all three errors.
    let text = f
        .tokenizer
        .decode(&t.tokens[t.turns[0].model_end..t.turns[0].end], false)
        .unwrap();
    assert!(
        text.contains("could not be read") && text.contains("nope") && text.contains("timed out"),
        "{text}"
    );
}

#[tokio::test]
async fn budgets_end_chains() {
    let f = fixture();
    let call =
        "<tool_call>{\"name\": \"add_numbers\", \"arguments\": {\"a\": 1, \"b\": 1}}</tool_call>";
    // Turn limit.
    let config = ChainConfig {
        max_turns: 2,
        ..ChainConfig::default()
    };
    let (t, _) = run(&f, &[call, call, call], &config).await;
    assert_eq!((t.finish_reason, t.turns.len()), (ChainEnd::MaxTurns, 2));
    assert_eq!(t.reward, Some(0.0));
    // Token budget: the long turn is cut and the chain marked truncated.
    let (probe, _) = run(&f, &["x"], &ChainConfig::default()).await;
    let config = ChainConfig {
        max_total_tokens: probe.prompt_len + 12,
        ..ChainConfig::default()
    };
    let long = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";
    let (t, _) = run(&f, &[long], &config).await;
    assert_eq!(t.finish_reason, ChainEnd::Truncated);
    assert_eq!(t.tokens.len(), probe.prompt_len + 12);
    assert_eq!(t.sampled_tokens(), 12);
}

#[tokio::test]
async fn calls_of_a_turn_run_concurrently_and_none_after_a_submitted_answer() {
    let f = fixture();
    let meet = "<tool_call>\n{\"name\": \"meet\", \"arguments\": {}}\n</tool_call>";
    let first = format!("{meet}\n{meet}");
    let second = "<tool_call>\n{\"name\": \"submit\", \"arguments\": {\"answer\": \"5\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add_numbers\", \"arguments\": {\"a\": 1, \"b\": 1}}\n</tool_call>";
    let script = [first.as_str(), second];
    let (t, _) = run(&f, &script, &ChainConfig::default()).await;
    let met: Vec<_> = t.turns[0]
        .calls
        .iter()
        .map(|c| c.observation.as_str())
        .collect();
    assert_eq!(met, ["met", "met"], "both calls were running at once");
    assert_eq!(t.finish_reason, ChainEnd::Answered);
    let names: Vec<_> = t.turns[1].calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["submit"],
        "the call after the submitted answer did not run"
    );
    check_mask(&t, &f, &script);
}
