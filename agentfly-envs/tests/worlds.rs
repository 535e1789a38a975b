//! The ready world servers on the real worlds (`.venv-worlds`, made by `scripts/setup`):
//! TextWorldExpress and ScienceWorld episodes through `RemoteEnv`, solved by the games'
//! own gold action sequences, and held out by their folds.

use agentfly_envs::{RemoteConfig, RemoteEnv, StepResult};
use serde_json::{Value, json};
use std::time::Duration;

fn world(name: &str, config: Value) -> RemoteConfig {
    RemoteConfig {
        start_timeout: Duration::from_secs(120),
        ..RemoteConfig::world(agentfly_testdata::worlds_python(), name, config)
    }
}

fn gold(first: &StepResult) -> Vec<String> {
    serde_json::from_value(first.info["gold_actions"].clone()).expect("gold_actions")
}

async fn reset(env: &mut RemoteEnv, options: Value) -> StepResult {
    env.begin(None, Some(&agentfly_core::Sample::new("s", options)))
        .await
        .expect("reset")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn textworld_express_commonsense_games_are_solved_by_their_gold_path() {
    let config = world(
        "textworld_express",
        json!({"game": "twc", "params": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0"}),
    );
    let mut env = RemoteEnv::start(config)
        .await
        .expect("start TextWorldExpress");
    let first = reset(&mut env, json!({"index": 3, "fold": "train", "gold": true})).await;
    assert!(
        first
            .observation
            .starts_with("Your task is to pick up objects"),
        "{}",
        first.observation
    );
    let actions = first.valid_actions.clone().expect("valid actions");
    assert!(actions.iter().any(|a| a == "look around"), "{actions:?}");
    assert_eq!(first.success, Some(false));
    assert_eq!(first.info["seed"], 3);
    let path = gold(&first);
    assert!(path.len() >= 3, "{path:?}");
    let mut last = first;
    for action in &path {
        assert!(!last.done, "done before the gold path ended");
        last = env.step(action).await.expect("step");
    }
    assert!(last.done && !last.truncated, "{last:?}");
    assert_eq!((last.success, last.score), (Some(true), Some(1.0)));
    assert_eq!(env.episode().steps, path.len());

    // An action the game does not know is its own text, not a failure; and the same seed
    // gives the same game again.
    let again = reset(&mut env, json!({"index": 3, "fold": "train"})).await;
    assert_eq!(again.observation, env_first_observation(&mut env).await);
    let odd = env.step("fly to the moon").await.expect("step");
    assert!(!odd.done);
    // Another fold is another game: the held-out split is the game's own.
    let test = reset(&mut env, json!({"index": 3, "fold": "test"})).await;
    assert_eq!(test.info["seed"], 20003);
    assert_ne!(test.observation, again.observation);
}

async fn env_first_observation(env: &mut RemoteEnv) -> String {
    reset(env, json!({"index": 3, "fold": "train"}))
        .await
        .observation
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn textworld_express_stops_at_its_step_limit() {
    let config = world(
        "textworld_express",
        json!({"game": "coin", "params": "numLocations=4,includeDoors=0", "step_limit": 3}),
    );
    let mut env = RemoteEnv::start(config)
        .await
        .expect("start TextWorldExpress");
    reset(&mut env, json!({"seed": 1})).await;
    let mut last = None;
    for _ in 0..4 {
        last = Some(env.step("look around").await.expect("step"));
    }
    let last = last.expect("a step");
    assert!(last.done && last.truncated, "{last:?}");
    assert_eq!(last.success, Some(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scienceworld_runs_through_the_same_bridge() {
    let config = world(
        "scienceworld",
        json!({"task": "find-living-thing", "simplifications": "easy", "step_limit": 100}),
    );
    let mut env = RemoteEnv::start(config).await.expect("start ScienceWorld");
    let first = reset(
        &mut env,
        json!({"variation": 0, "fold": "dev", "gold": true}),
    )
    .await;
    assert!(
        first.observation.contains("living thing"),
        "{}",
        first.observation
    );
    assert!(first.valid_actions.as_ref().is_some_and(|a| a.len() > 10));
    let path = gold(&first);
    let mut last = first;
    for action in &path {
        if last.done {
            break;
        }
        last = env.step(action).await.expect("step");
    }
    assert_eq!(
        (last.success, last.score),
        (Some(true), Some(100.0)),
        "{last:?}"
    );
    assert!(env.episode().total_reward >= 100.0 - last.score.unwrap_or(0.0));
}
