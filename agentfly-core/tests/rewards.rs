//! `#[reward]` end to end: parameters filled by name, missing and mistyped fields,
//! environments, return shapes, panics, timeouts and non-finite values.

use agentfly_core::{
    CallContext, RewardError, RewardInput, RewardOutput, Rewards, Sample, Trajectory, reward,
};
use serde_json::json;
use std::time::Duration;

/// 1 when the response parses to the sample's `answer`.
#[reward]
fn numeric(response: &str, answer: f64) -> f32 {
    match response.trim().parse::<f64>() {
        Ok(x) if x == answer => 1.0,
        _ => 0.0,
    }
}

#[reward(name = "with_metrics")]
fn metrics(response: String, trajectory: &Trajectory, unit: Option<String>) -> RewardOutput {
    RewardOutput::new(response.len() as f32)
        .with_metric("turns", trajectory.num_turns() as f64)
        .with_metric("has_unit", if unit.is_some() { 1.0 } else { 0.0 })
}

/// Fails on an empty response.
#[reward]
async fn fallible(response: &str, keywords: Vec<String>) -> Result<f32, String> {
    tokio::task::yield_now().await;
    if response.is_empty() {
        return Err("empty response".into());
    }
    let hits = keywords
        .iter()
        .filter(|k| response.contains(k.as_str()))
        .count();
    Ok(hits as f32 / keywords.len() as f32)
}

#[derive(Default)]
struct Ledger {
    balance: i64,
}

agentfly_core::default_env!(Ledger);

/// Reads the environment the chain's tools changed.
#[reward(env = Ledger)]
fn balance_matches(env: &mut Ledger, target: i64) -> f32 {
    if env.balance == target { 1.0 } else { 0.0 }
}

#[reward]
fn panicky(response: &str) -> f32 {
    panic!("cannot score {response:?}")
}

#[reward(timeout_ms = 50)]
async fn sluggish() -> f32 {
    tokio::time::sleep(Duration::from_secs(5)).await;
    1.0
}

#[reward]
fn not_a_number() -> f32 {
    f32::NAN
}

fn score(
    name: &str,
    response: &str,
    sample: &Sample,
    ctx: &mut CallContext,
) -> Result<RewardOutput, RewardError> {
    let trajectory = Trajectory {
        turns: vec![Default::default(); 3],
        ..Trajectory::default()
    };
    Rewards::all().unwrap().score_blocking(
        name,
        RewardInput {
            response,
            trajectory: &trajectory,
            sample,
            ctx,
        },
    )
}

#[test]
fn parameters_are_filled_by_name() {
    let sample = Sample::new("q1", json!({"question": "12*7?", "answer": 84}));
    let mut ctx = CallContext::new();
    assert_eq!(
        score("numeric", "84", &sample, &mut ctx).unwrap().reward,
        1.0
    );
    assert_eq!(
        score("numeric", "85", &sample, &mut ctx).unwrap().reward,
        0.0
    );

    let out = score("with_metrics", "abcd", &sample, &mut ctx).unwrap();
    assert_eq!(out.reward, 4.0);
    assert_eq!(out.metrics["turns"], 3.0);
    assert_eq!(out.metrics["has_unit"], 0.0);
    let with_unit = Sample::new("q2", json!({"unit": "cm"}));
    assert_eq!(
        score("with_metrics", "", &with_unit, &mut ctx)
            .unwrap()
            .metrics["has_unit"],
        1.0
    );

    let kw = Sample::new("q3", json!({"keywords": ["red", "blue"]}));
    assert_eq!(
        score("fallible", "red car", &kw, &mut ctx).unwrap().reward,
        0.5
    );
}

#[test]
fn a_missing_or_mistyped_field_names_the_field_and_the_sample() {
    let mut ctx = CallContext::new();
    let sample = Sample::new("q7", json!({"question": "?", "solution": 3}));
    let err = score("numeric", "3", &sample, &mut ctx).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reward `numeric`: sample `q7` has no field `answer` (its fields: question, solution)"
    );
    let sample = Sample::new("q8", json!({"answer": "three"}));
    let err = score("numeric", "3", &sample, &mut ctx).unwrap_err();
    assert_eq!(
        err.to_string(),
        "reward `numeric`: field `answer` of sample `q8`: invalid type: string \"three\", expected f64"
    );
}

#[test]
fn errors_panics_timeouts_and_nan_are_reported_not_raised() {
    let mut ctx = CallContext::new();
    let sample = Sample::new("s", json!({"keywords": ["x"]}));
    assert_eq!(
        score("fallible", "", &sample, &mut ctx)
            .unwrap_err()
            .to_string(),
        "reward `fallible` failed: empty response"
    );
    assert_eq!(
        score("panicky", "hi", &sample, &mut ctx)
            .unwrap_err()
            .to_string(),
        "reward `panicky` panicked: cannot score \"hi\""
    );
    assert_eq!(
        score("sluggish", "", &sample, &mut ctx).unwrap_err(),
        RewardError::TimedOut {
            reward: "sluggish".into(),
            after_ms: 50
        }
    );
    assert!(matches!(
        score("not_a_number", "", &sample, &mut ctx).unwrap_err(),
        RewardError::NotFinite { .. }
    ));
    assert_eq!(
        score("nope", "", &sample, &mut ctx)
            .unwrap_err()
            .to_string(),
        "unknown reward `nope`; the rewards here are: balance_matches, fallible, not_a_number, numeric, panicky, sluggish, with_metrics"
    );
}

#[test]
fn a_reward_reads_the_chains_environment() {
    let sample = Sample::new("s", json!({"target": 10}));
    let mut ctx = CallContext::new();
    let err = score("balance_matches", "", &sample, &mut ctx).unwrap_err();
    assert!(matches!(err, RewardError::Environment(_)), "{err}");
    ctx.insert_env(Ledger { balance: 10 });
    assert_eq!(
        score("balance_matches", "", &sample, &mut ctx)
            .unwrap()
            .reward,
        1.0
    );
    ctx.env_mut::<Ledger>().unwrap().balance = 9;
    assert_eq!(
        score("balance_matches", "", &sample, &mut ctx)
            .unwrap()
            .reward,
        0.0
    );
}

#[test]
fn specs_describe_themselves() {
    let rewards = Rewards::from_names(&["numeric", "with_metrics", "balance_matches"]).unwrap();
    let numeric = rewards.get("numeric").unwrap();
    assert_eq!(
        numeric.description,
        "1 when the response parses to the sample's `answer`."
    );
    assert_eq!(numeric.fields, ["answer"]);
    assert_eq!(rewards.get("with_metrics").unwrap().fields, ["unit"]);
    assert_eq!(rewards.get("with_metrics").unwrap().description, "");
    let env = rewards.get("balance_matches").unwrap();
    assert_eq!((env.env, env.fields), (Some("Ledger"), &["target"][..]));
    let err = Rewards::from_names(&["numeric", "f1"])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("unknown reward `f1`; the linked rewards are: balance_matches,"),
        "{err}"
    );
}
