//! The endpoint's overhead: chat completions of SmolLM2-135M through `agentfly serve`'s
//! HTTP endpoint (render, tokenize, HTTP and JSON both ways, the reply read back) against the
//! same requests sent to the engine directly, pre-tokenized, at 1, 8 and 32 concurrent
//! clients; greedy, up to 64 new tokens each, a fresh engine per measurement, each measured
//! twice in the order engine, endpoint, endpoint, engine, and the faster of each pair kept.
//!
//! ```sh
//! cargo run --release -- fetch-model
//! cargo bench --workspace --bench serve
//! ```

use agentfly_core::rollout::{GenerateRequest, Policy};
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_model::Pretrained;
use agentfly_serve::{ChatModel, ServeConfig, Server};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

const REQUESTS: usize = 32;
const NEW_TOKENS: usize = 64;

fn messages(i: usize) -> Value {
    const TOPICS: [&str; 8] = [
        "rivers", "bridges", "bread", "clocks", "maps", "bees", "ships", "paper",
    ];
    json!([{"role": "user", "content": format!("Write a long, detailed paragraph about the history of {} ({}).", TOPICS[i % 8], i)}])
}

fn load() -> (Pretrained, ChatModel) {
    let model = Pretrained::load(
        agentfly_testdata::smollm2_gguf(),
        &agentfly_testdata::support::device(),
    )
    .expect("the SmolLM2 GGUF");
    let (tokenizer, template, eos) = model.chat_parts().expect("chat parts");
    let chat = ChatModel::new("smollm2", tokenizer, template, eos, 2048).expect("chat model");
    (model, chat)
}

/// Seconds and sampled tokens of the requests sent to the engine, `clients` at once.
async fn direct(clients: usize) -> (f64, usize) {
    let (model, chat) = load();
    let eos = model.chat_parts().expect("chat parts").2;
    let contexts: Vec<Vec<u32>> = (0..REQUESTS)
        .map(|i| {
            let msgs: Vec<Value> = messages(i).as_array().unwrap().clone();
            let text = chat.render(&msgs, None, true).expect("render");
            chat.tokenizer().encode(&text, false).expect("encode")
        })
        .collect();
    let engine = Engine::start(model, EngineConfig::default());
    let start = Instant::now();
    let tokens: usize = futures_util::stream::iter(contexts)
        .map(|context| {
            engine.generate(GenerateRequest {
                context,
                max_new_tokens: NEW_TOKENS,
                stop_ids: eos.clone(),
                stop_strings: Vec::new(),
                temperature: 0.0,
                top_p: 1.0,
                top_k: 0,
                seed: 0,
            })
        })
        .buffer_unordered(clients)
        .map(|g| g.expect("generate").ids.len())
        .fold(0, |a, b| async move { a + b })
        .await;
    (start.elapsed().as_secs_f64(), tokens)
}

/// One request over HTTP/1.1; the reply's `usage.completion_tokens`.
async fn post(addr: std::net::SocketAddr, body: &str) -> usize {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(body.as_bytes()).await.expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("read");
    let body = text.split_once("\r\n\r\n").expect("a reply").1;
    let reply: Value = serde_json::from_str(body).expect("JSON");
    reply["usage"]["completion_tokens"].as_u64().expect("usage") as usize
}

/// Seconds and sampled tokens of the same requests through the endpoint.
async fn endpoint(clients: usize) -> (f64, usize) {
    let (model, chat) = load();
    let engine = Engine::start(model, EngineConfig::default());
    let policy: Arc<dyn Policy> = Arc::new(engine);
    let server = Server::start(
        chat,
        policy,
        ServeConfig::default(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .expect("serve");
    let addr = server.addr();
    let bodies: Vec<String> = (0..REQUESTS)
        .map(|i| json!({"model": "smollm2", "messages": messages(i), "temperature": 0, "max_tokens": NEW_TOKENS}).to_string())
        .collect();
    let start = Instant::now();
    let tokens: usize = futures_util::stream::iter(bodies)
        .map(|body| async move { post(addr, &body).await })
        .buffer_unordered(clients)
        .fold(0, |a, b| async move { a + b })
        .await;
    let seconds = start.elapsed().as_secs_f64();
    server.shutdown().await.expect("shutdown");
    (seconds, tokens)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    agentfly_model::alloc::retain_freed_memory();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    for clients in [1, 8, 32] {
        eprintln!("{clients} clients: the engine directly, then through the endpoint ...");
        let first = runtime.block_on(direct(clients));
        let served = runtime.block_on(endpoint(clients));
        let again = runtime.block_on(endpoint(clients));
        let last = runtime.block_on(direct(clients));
        let best = |a: (f64, usize), b: (f64, usize)| if a.0 <= b.0 { a } else { b };
        rows.push((clients, best(first, last), best(served, again)));
    }
    println!(
        "\n## Serving: SmolLM2-135M-Instruct, {REQUESTS} chat completions of up to {NEW_TOKENS} new tokens, greedy, CPU\n"
    );
    println!(
        "| clients at once | engine directly tok/s | through `agentfly serve` tok/s | endpoint / engine | tokens (engine / endpoint) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for (clients, (ds, dt), (es, et)) in rows {
        let (d, e) = (dt as f64 / ds, et as f64 / es);
        println!(
            "| {clients} | {d:.1} | {e:.1} | {:.2}× | {dt} / {et} |",
            e / d
        );
    }
}
