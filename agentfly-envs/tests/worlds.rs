//! The ready world servers on the real worlds (`.venv-worlds`, made by `scripts/setup`):
//! TextWorldExpress and ScienceWorld episodes through `RemoteEnv`, solved by the games'
//! own gold action sequences, and held out by their folds — over a child's stdio, and
//! over HTTP with one server hosting several episodes at once.

use agentfly_envs::{RemoteConfig, RemoteEnv, StepResult};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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

/// A ready world's server run over HTTP on a free port, as a user would start it by hand
/// (`python serve_textworld_express.py --http 8000`); killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(world: &str) -> HttpServer {
        let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut child = Command::new(agentfly_testdata::worlds_python())
            .arg(python.join("worlds").join(format!("serve_{world}.py")))
            .args(["--http", "0"])
            .env("PYTHONPATH", &python)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the world's HTTP server");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        // Its stderr is read to the end (a JVM may write to it), the URL sent on.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server says where it listens");
        HttpServer { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn textworld_express_over_http_plays_two_games_at_once_on_one_server() {
    let server = HttpServer::start("textworld_express");
    let config = RemoteConfig {
        url: Some(server.url.clone()),
        start_timeout: Duration::from_secs(120),
        config: json!({"game": "twc", "params": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0"}),
        ..RemoteConfig::default()
    };
    let play = |index: usize| {
        let config = config.clone();
        async move {
            let mut env = RemoteEnv::start(config).await.expect("an instance");
            let first = reset(
                &mut env,
                json!({"index": index, "fold": "test", "gold": true}),
            )
            .await;
            let mut last = first.clone();
            for action in gold(&first) {
                last = env.step(&action).await.expect("step");
            }
            (first.info["seed"].clone(), last)
        }
    };
    let ((seed_a, a), (seed_b, b)) = tokio::join!(play(5), play(6));
    assert_eq!((seed_a, seed_b), (json!(20005), json!(20006)));
    for last in [a, b] {
        assert!(last.done && !last.truncated, "{last:?}");
        assert_eq!((last.success, last.score), (Some(true), Some(1.0)));
    }
}
