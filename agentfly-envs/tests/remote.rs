//! `RemoteEnv` against a real Python server (tests/worlds/counter.py), over a child
//! process's stdio (over HTTP: remote_http.rs): episodes, the world's errors, and servers that crash,
//! hang, flood or print where they should not.

use agentfly_core::Sample;
use agentfly_core::env::{Env, EnvPool, PoolConfig};
use agentfly_envs::{RemoteConfig, RemoteEnv, RemoteError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn world() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/worlds/counter.py")
}

fn stdio_config() -> RemoteConfig {
    RemoteConfig {
        command: vec!["python3".into(), world().display().to_string()],
        call_timeout: Duration::from_secs(10),
        ..RemoteConfig::default()
    }
}

fn alive(pid: u32) -> bool {
    // A zombie still has its /proc entry; it is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn an_episode_over_stdio() {
    let mut env = RemoteEnv::start(stdio_config()).await.expect("start");
    assert_eq!(env.server()["protocol"], 1);
    assert_eq!(env.server()["name"], "Counter");
    let first = env.begin(Some(2), None).await.expect("reset");
    assert_eq!(first.observation, "Reach 4. Total 0.");
    assert_eq!(
        first.valid_actions.as_deref(),
        Some(&["add 1".to_string(), "add 2".into()][..])
    );
    assert!(!first.done);

    let step = env.step("add 2").await.expect("step");
    assert_eq!(step.observation, "Total 2.");
    assert_eq!(
        (step.reward, step.done, step.score),
        (0.0, false, Some(0.5))
    );
    // What JSON cannot carry arrives as its repr.
    assert_eq!(step.info["odd"], "{1, 2}");
    let last = env.step("add 2").await.expect("step");
    assert_eq!((last.reward, last.done, last.score), (1.0, true, Some(1.0)));
    assert_eq!(env.episode().steps, 2);
    assert_eq!(env.episode().total_reward, 1.0);
    assert!(env.episode().done);

    // The episode is over: the world says so, and the instance stays usable.
    let over = env.step("add 1").await.expect_err("over");
    assert!(matches!(over, RemoteError::Server { .. }), "{over}");
    assert!(over.to_string().contains("reset first"), "{over}");
    assert!(env.lost().is_none());

    // Env::reset with a sample: its fields are the reset's options.
    let sample = Sample::new("s1", serde_json::json!({"target": 1}));
    env.reset(Some(&sample)).await.expect("reset");
    assert_eq!(
        env.episode().last.as_ref().map(|l| l.observation.as_str()),
        Some("Reach 1. Total 0.")
    );
    // Back in the pool (no sample), the next step starts a fresh episode itself.
    env.reset(None).await.expect("reset");
    let fresh = env.step("add 1").await.expect("step");
    assert_eq!(fresh.observation, "Total 1.");
    env.health_check().await.expect("healthy");
    let pid = env.pid().expect("a child");
    env.close().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!alive(pid), "the server outlived close");
}

#[tokio::test]
async fn the_worlds_own_errors_leave_the_instance_usable() {
    let mut env = RemoteEnv::start(stdio_config()).await.expect("start");
    env.begin(Some(0), None).await.expect("reset");
    let err = env.step("fail").await.expect_err("raises");
    match &err {
        RemoteError::Server {
            message, traceback, ..
        } => {
            assert_eq!(message, "ValueError: the world refuses");
            assert!(
                traceback
                    .as_deref()
                    .is_some_and(|t| t.contains("counter.py"))
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_fatal());
    // Printing to stdout (Python's and a subprocess's) does not break the protocol.
    let noisy = env.step("noise").await.expect("noise");
    assert_eq!(noisy.observation, "Total 0.");
    assert_eq!(
        env.step("add 1").await.expect("step").observation,
        "Total 1."
    );
}

#[tokio::test]
async fn a_crashed_server_loses_the_instance() {
    let mut env = RemoteEnv::start(stdio_config()).await.expect("start");
    env.begin(Some(0), None).await.expect("reset");
    let err = env.step("crash").await.expect_err("crash");
    assert!(matches!(err, RemoteError::Lost(_)), "{err:?}");
    assert!(err.to_string().contains("exit status: 3"), "{err}");
    assert!(env.lost().is_some());
    // Every later call fails at once, and the pool's health check fails.
    let again = env.step("add 1").await.expect_err("lost");
    assert!(matches!(again, RemoteError::Lost(_)));
    assert!(env.health_check().await.is_err());
    assert!(env.reset(None).await.is_err());
}

#[tokio::test]
async fn a_hung_server_is_cut_off_and_killed() {
    let config = RemoteConfig {
        call_timeout: Duration::from_secs(1),
        ..stdio_config()
    };
    let mut env = RemoteEnv::start(config).await.expect("start");
    env.begin(Some(0), None).await.expect("reset");
    let pid = env.pid().expect("a child");
    let start = Instant::now();
    let err = env.step("hang").await.expect_err("hangs");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, RemoteError::Timeout { ref method, .. } if method == "step"),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!alive(pid), "the hung server was not killed");
    assert!(env.step("add 1").await.is_err());
}

#[tokio::test]
async fn an_oversized_answer_loses_the_instance() {
    let mut env = RemoteEnv::start(stdio_config()).await.expect("start");
    env.begin(Some(0), None).await.expect("reset");
    let err = env.step("big").await.expect_err("too big");
    assert!(err.to_string().contains("over 1048576 bytes"), "{err}");
    assert!(env.lost().is_some());
}

#[tokio::test]
async fn misconfigured_servers_are_named() {
    let none = RemoteEnv::start(RemoteConfig::default())
        .await
        .err()
        .expect("no server");
    assert!(matches!(none, RemoteError::Config(_)), "{none}");
    let missing = RemoteEnv::start(RemoteConfig {
        command: vec!["/nonexistent/world".into()],
        ..RemoteConfig::default()
    })
    .await
    .err()
    .expect("no such program");
    assert!(matches!(missing, RemoteError::Start(_)), "{missing}");
    // A program that is not a server: it exits, and its stderr is in the error.
    let not_a_server = RemoteEnv::start(RemoteConfig {
        command: vec![
            "python3".into(),
            "-c".into(),
            "import sys; sys.exit('no world here')".into(),
        ],
        ..RemoteConfig::default()
    })
    .await
    .err()
    .expect("not a server");
    assert!(
        not_a_server.to_string().contains("no world here"),
        "{not_a_server}"
    );
}

#[tokio::test]
async fn the_pool_replaces_a_crashed_instance() {
    let pool = EnvPool::<RemoteEnv>::new(
        stdio_config(),
        PoolConfig {
            capacity: 1,
            ..PoolConfig::default()
        },
    );
    let mut lease = pool.lease().await.expect("lease");
    let first_pid = lease.pid();
    lease.begin(Some(0), None).await.expect("reset");
    assert!(lease.step("crash").await.is_err());
    drop(lease);
    let mut lease = pool.lease().await.expect("a replacement");
    assert_ne!(lease.pid(), first_pid);
    lease.begin(Some(0), None).await.expect("reset");
    assert_eq!(
        lease.step("add 1").await.expect("step").observation,
        "Total 1."
    );
    drop(lease);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let metrics = pool.metrics();
    assert_eq!((metrics.created, metrics.replaced), (2, 1), "{metrics:?}");
    pool.close().await;
}
