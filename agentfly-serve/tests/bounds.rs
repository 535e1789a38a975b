//! The endpoint's bounds and sessions, over raw HTTP: a client that disconnects frees its
//! slot (its generation is dropped), a full queue answers 503, sessions are capped and
//! forgotten when idle, bodies are capped; a rewritten history starts a new trajectory and
//! an extended one continues it.

use agentfly_core::rollout::{GenerateRequest, Generated, GenerationEnd, Policy, PolicyError};
use agentfly_serve::{ChatModel, ServeConfig, Server};
use agentfly_testdata::{smollm2_gguf, support::device};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Answers `max_tokens` 1 at once ("OK" then the end of the turn, cut to one token: "OK"),
/// and anything longer never; counts the generations dropped unfinished.
struct Slow {
    eot: u32,
    ok: u32,
    dropped: Arc<AtomicUsize>,
}

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[agentfly_core::async_trait]
impl Policy for Slow {
    async fn generate(&self, request: GenerateRequest) -> Result<Generated, PolicyError> {
        if request.max_new_tokens > 1 {
            let _guard = CountDrop(self.dropped.clone());
            std::future::pending::<()>().await;
        }
        let _ = self.eot;
        Ok(Generated {
            ids: vec![self.ok],
            logprobs: vec![-0.1],
            end: GenerationEnd::Length,
            policy_version: 3,
        })
    }
}

fn start(config: ServeConfig) -> (tokio::runtime::Runtime, Server, Arc<AtomicUsize>) {
    let model = agentfly_model::Pretrained::load(smollm2_gguf(), &device()).unwrap();
    let (tokenizer, template, eos) = model.chat_parts().unwrap();
    let ok = tokenizer.encode("OK", false).unwrap()[0];
    let chat = ChatModel::new("smollm2", tokenizer, template, eos.clone(), 2048).unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let policy = Arc::new(Slow {
        eot: eos[0],
        ok,
        dropped: dropped.clone(),
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime
        .block_on(Server::start(
            chat,
            policy,
            config,
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    (runtime, server, dropped)
}

fn send(addr: SocketAddr, method: &str, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = send(addr, method, path, body);
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn chat(messages: Value, max_tokens: usize) -> String {
    json!({"model": "m", "messages": messages, "max_tokens": max_tokens}).to_string()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn a_client_that_disconnects_frees_its_slot_and_a_full_queue_answers_503() {
    let (_runtime, server, dropped) = start(ServeConfig {
        max_concurrent: 1,
        queue_wait: Duration::from_millis(300),
        ..ServeConfig::default()
    });
    let addr = server.addr();
    let long = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &chat(json!([user("hi")]), 50),
    );
    std::thread::sleep(Duration::from_millis(200));
    let (status, body) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &chat(json!([user("hi")]), 1),
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no generation slot"), "{body}");
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    drop(long);
    let deadline = Instant::now() + Duration::from_secs(5);
    while dropped.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the disconnected client's generation was dropped"
    );
    let (status, body) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &chat(json!([user("hi")]), 1),
    );
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "OK");
    assert_eq!(reply["choices"][0]["finish_reason"], "length");
    assert_eq!(reply["usage"]["completion_tokens"], 1);
}

#[test]
fn sessions_are_capped_forgotten_when_idle_and_bodies_are_capped() {
    let (_runtime, server, _) = start(ServeConfig {
        max_sessions: 2,
        session_idle: Duration::from_millis(400),
        max_request_bytes: 2000,
        ..ServeConfig::default()
    });
    let addr = server.addr();
    let body = chat(json!([user("hi")]), 1);
    for id in ["s1", "s2"] {
        assert_eq!(
            http(
                addr,
                "POST",
                &format!("/sessions/{id}/v1/chat/completions"),
                &body
            )
            .0,
            200
        );
    }
    let (status, text) = http(addr, "POST", "/sessions/s3/v1/chat/completions", &body);
    assert_eq!(status, 429, "{text}");
    assert_eq!(http(addr, "DELETE", "/sessions/s1", "").0, 204);
    assert_eq!(
        http(addr, "POST", "/sessions/s3/v1/chat/completions", &body).0,
        200
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(server.sessions(), 0, "idle sessions are forgotten");
    assert_eq!(http(addr, "GET", "/sessions/s2/trajectories", "").0, 404);
    let big = chat(json!([user(&"x".repeat(3000))]), 1);
    let (status, text) = http(addr, "POST", "/v1/chat/completions", &big);
    assert_eq!(status, 413, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2000 bytes")
    );
}

#[test]
fn an_extended_history_continues_its_trajectory_and_a_rewritten_one_starts_another() {
    let (runtime, server, _) = start(ServeConfig::default());
    let addr = server.addr();
    let path = "/sessions/episode-1/v1/chat/completions";
    assert_eq!(
        http(addr, "POST", path, &chat(json!([user("a")]), 1)).0,
        200
    );
    // The reply ("OK"), then a new user message: the same trajectory.
    let extended = json!([user("a"), {"role": "assistant", "content": "OK"}, user("b")]);
    assert_eq!(http(addr, "POST", path, &chat(extended, 1)).0, 200);
    // A history the model never saw: a new trajectory.
    assert_eq!(
        http(addr, "POST", path, &chat(json!([user("c")]), 1)).0,
        200
    );
    let (status, text) = http(addr, "GET", "/sessions/episode-1/trajectories", "");
    assert_eq!(status, 200);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["turns"].as_array().unwrap().len(), 2);
    assert_eq!(rows[1]["turns"].as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["turns"][0]["policy_version"], 3);
    for row in &rows {
        let mask: Vec<u8> = serde_json::from_value(row["loss_mask"].clone()).unwrap();
        assert_eq!(
            mask.iter().filter(|&&m| m == 1).count(),
            row["turns"].as_array().unwrap().len()
        );
        assert_eq!(row["sample_id"], "episode-1");
        assert_eq!(row["reward"], Value::Null);
    }
    let (status, _) = http(
        addr,
        "POST",
        "/sessions/episode-1/reward",
        r#"{"reward": 0.5}"#,
    );
    assert_eq!(status, 200);
    let record = runtime.block_on(server.take_session("episode-1")).unwrap();
    assert_eq!(record.reward, Some(0.5));
    assert!(record.trajectories.iter().all(|t| t.reward == Some(0.5)));
    assert_eq!(server.sessions(), 0);
}

#[test]
fn an_episode_past_its_turns_records_the_last_observation_and_ends() {
    let (runtime, server, _) = start(ServeConfig {
        max_session_trajectories: 2,
        ..ServeConfig::default()
    });
    let addr = server.addr();
    let options = agentfly_serve::SessionOptions {
        max_turns: Some(1),
        ..Default::default()
    };
    server.open_session("limited", options).unwrap();
    let path = "/sessions/limited/v1/chat/completions";
    assert_eq!(
        http(addr, "POST", path, &chat(json!([user("a")]), 1)).0,
        200
    );
    let extended = json!([user("a"), {"role": "assistant", "content": "OK"}, user("b")]);
    let (status, body) = http(addr, "POST", path, &chat(extended.clone(), 1));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("max_turns_exceeded"), "{body}");
    // As a chain that ran out of turns: the last observation appended, then the end.
    let (status, body) = http(addr, "POST", path, &chat(extended, 1));
    assert_eq!(status, 400);
    assert!(body.contains("episode_spent"), "{body}");
    let record = runtime.block_on(server.take_session("limited")).unwrap();
    assert_eq!(record.trajectories.len(), 1);
    let t = &record.trajectories[0];
    assert_eq!(t.turns.len(), 1);
    assert!(
        t.turns[0].end > t.turns[0].model_end,
        "the user's `b` is recorded, mask 0"
    );
    assert_eq!(*t.loss_mask.last().unwrap(), 0);

    // A client rewriting its history at every request fills its session's cap.
    let path = "/sessions/rewriter/v1/chat/completions";
    for text in ["a", "b"] {
        assert_eq!(
            http(addr, "POST", path, &chat(json!([user(text)]), 1)).0,
            200
        );
    }
    let (status, body) = http(addr, "POST", path, &chat(json!([user("c")]), 1));
    assert_eq!(status, 400);
    assert!(body.contains("session_full"), "{body}");
}
