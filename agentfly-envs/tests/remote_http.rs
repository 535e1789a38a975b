//! The HTTP remote-environment server (agentfly_remote.py) and the client together:
//! episodes of several instances on one server; a lost
//! or dropped instance is closed on the server (its JVM does not live on), idle instances are
//! reaped, bodies are capped, sockets time out, instance ids are unguessable and a shared
//! token can be required.

use agentfly_core::env::Env;
use agentfly_envs::{RemoteConfig, RemoteEnv, RemoteError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The counter world served over HTTP on a free port with `args` and `env`; killed on drop.
struct HttpWorld {
    child: Child,
    url: String,
}

impl HttpWorld {
    fn start(args: &[&str], env: &[(&str, &str)]) -> HttpWorld {
        let world = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/worlds/counter.py");
        let mut child = Command::new("python3")
            .arg(world)
            .args(["--http", "0"])
            .args(args)
            .env(
                "PYTHONPATH",
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python"),
            )
            .env_remove("AGENTFLY_REMOTE_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the HTTP world");
        let mut line = String::new();
        BufReader::new(child.stderr.take().expect("stderr"))
            .read_line(&mut line)
            .expect("its first line");
        let url = line
            .split_whitespace()
            .last()
            .filter(|u| u.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        HttpWorld { child, url }
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// One raw request; the status line's code (0 when the connection closed first).
    fn raw(&self, request: &[u8]) -> u16 {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = stream.write_all(request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer)
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    /// The server's instance count, as `GET /health` gives it.
    fn instances(&self, token: Option<&str>) -> u64 {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let mut stream = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        write!(
            stream,
            "GET /health HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
        let health: serde_json::Value = serde_json::from_str(body).unwrap();
        health["instances"].as_u64().unwrap()
    }

    /// Waits up to `within` for the server to hold `n` instances.
    fn wait_for_instances(&self, n: u64, within: Duration) -> u64 {
        let start = Instant::now();
        loop {
            let now = self.instances(None);
            if now == n || start.elapsed() > within {
                return now;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HttpWorld {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(server: &HttpWorld) -> RemoteConfig {
    RemoteConfig {
        url: Some(server.url.clone()),
        call_timeout: Duration::from_secs(1),
        ..RemoteConfig::default()
    }
}

#[tokio::test]
async fn lost_and_dropped_instances_are_closed_on_the_server() {
    let server = HttpWorld::start(&[], &[]);
    let mut lost = RemoteEnv::start(config(&server)).await.unwrap();
    let dropped = RemoteEnv::start(config(&server)).await.unwrap();
    let kept = RemoteEnv::start(config(&server)).await.unwrap();
    assert_eq!(server.instances(None), 3);
    lost.begin(Some(0), None).await.unwrap();
    let err = lost.step("hang").await.unwrap_err();
    assert!(matches!(err, RemoteError::Timeout { .. }), "{err:?}");
    assert!(lost.lost().is_some());
    assert_eq!(server.wait_for_instances(2, Duration::from_secs(5)), 2);
    drop(dropped);
    assert_eq!(server.wait_for_instances(1, Duration::from_secs(5)), 1);
    kept.close().await;
    assert_eq!(server.wait_for_instances(0, Duration::from_secs(5)), 0);
    drop(lost);
}

#[tokio::test]
async fn instance_ids_are_unguessable() {
    let server = HttpWorld::start(&[], &[]);
    let a = RemoteEnv::start(config(&server)).await.unwrap();
    let b = RemoteEnv::start(config(&server)).await.unwrap();
    let id = |e: &RemoteEnv| e.instance().as_str().unwrap().to_string();
    let (a, b) = (id(&a), id(&b));
    for key in [&a, &b] {
        let secret = key.rsplit('-').next().unwrap();
        assert!(
            secret.len() >= 32 && secret.chars().all(|c| c.is_ascii_hexdigit()),
            "{key}"
        );
    }
    assert_ne!(a, b);
}

#[tokio::test]
async fn idle_instances_are_reaped_and_then_lost() {
    let server = HttpWorld::start(&["--idle-timeout", "1"], &[]);
    let mut env = RemoteEnv::start(config(&server)).await.unwrap();
    env.begin(Some(0), None).await.unwrap();
    assert_eq!(server.wait_for_instances(0, Duration::from_secs(5)), 0);
    let err = env.step("add 1").await.unwrap_err();
    assert!(matches!(err, RemoteError::Lost(_)), "{err:?}");
    assert!(err.to_string().contains("no instance"), "{err}");
}

#[test]
fn bodies_are_capped_and_slow_clients_cut_off() {
    let server = HttpWorld::start(&["--max-body", "1000", "--socket-timeout", "1"], &[]);
    let start = Instant::now();
    let big = b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n{";
    assert_eq!(server.raw(big), 413);
    assert_eq!(
        server.raw(b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"),
        400
    );
    assert_eq!(
        server.raw(b"POST /step HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        411
    );
    // A request that never ends is cut off after the socket timeout.
    assert_eq!(
        server.raw(b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"),
        0
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(server.instances(None), 0, "the server still answers");
}

#[tokio::test]
async fn a_shared_token_is_required_when_the_server_has_one() {
    let server = HttpWorld::start(&[], &[("AGENTFLY_REMOTE_TOKEN", "open-sesame")]);
    let Err(err) = RemoteEnv::start(config(&server)).await else {
        panic!("no token, yet started");
    };
    assert!(err.to_string().contains("401"), "{err}");
    let with_token = RemoteConfig {
        token: Some("open-sesame".into()),
        ..config(&server)
    };
    let mut env = RemoteEnv::start(with_token.clone()).await.unwrap();
    env.begin(Some(0), None).await.unwrap();
    assert_eq!(env.step("add 1").await.unwrap().observation, "Total 1.");
    assert_eq!(server.instances(Some("open-sesame")), 1);
    let wrong = RemoteConfig {
        token: Some("guess".into()),
        ..config(&server)
    };
    assert!(RemoteEnv::start(wrong).await.is_err());
    // The token is never written out with the configuration.
    let written = serde_json::to_string(&with_token).unwrap();
    assert!(!written.contains("open-sesame"), "{written}");
    assert!(!format!("{with_token:?}").contains("open-sesame"));
}

#[tokio::test]
async fn episodes_over_http_share_one_server() {
    let server = HttpWorld::start(&[], &[]);
    let config = RemoteConfig {
        url: Some(server.url.clone()),
        call_timeout: Duration::from_secs(10),
        ..RemoteConfig::default()
    };
    let mut a = RemoteEnv::start(config.clone()).await.expect("instance a");
    let mut b = RemoteEnv::start(config).await.expect("instance b");
    a.begin(Some(0), None).await.expect("reset a"); // target 2
    b.begin(Some(3), None).await.expect("reset b"); // target 5
    assert_eq!(a.step("add 2").await.expect("a").observation, "Total 2.");
    assert_eq!(b.step("add 1").await.expect("b").observation, "Total 1.");
    assert!(a.episode().done && !b.episode().done);
    let err = b.step("fail").await.expect_err("raises");
    assert!(
        err.to_string().contains("ValueError: the world refuses"),
        "{err}"
    );
    b.health_check().await.expect("healthy");
    drop(server);
    let gone = b.step("add 1").await.expect_err("server gone");
    assert!(gone.is_fatal(), "{gone:?}");
    assert!(b.health_check().await.is_err());
}
