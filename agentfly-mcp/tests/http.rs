//! agentfly's MCP client over streamable HTTP (`url = "http://…"`), against a stateful
//! server written with the official Python SDK (`tests/servers/http_notes.py`, run from
//! `.venv-mcp`, which `scripts/setup` makes): its tools join the toolbox, each chain gets
//! an HTTP session of its own (the server keys its notes by `Mcp-Session-Id`), an error is
//! an observation, and a server that goes away ends only the chain that was using it.
//! And the other way: our tools served by `serve_http`, reached by that same client.

use agentfly_core::env::{EnvPools, PoolConfig};
use agentfly_core::tool::ToolErrorKind;
use agentfly_core::{CallContext, Toolbox};
use agentfly_mcp::{McpServerConfig, McpServers};
use serde_json::json;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

agentfly_core::link!(agentfly_tools);

/// The notes server on a free port, once it accepts connections.
fn notes_server() -> (Child, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/http_notes.py");
    let child = Command::new(agentfly_testdata::mcp_python())
        .args([script, &port.to_string()])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the Python SDK's server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_server_over_http_gives_each_chain_its_own_session() {
    let (mut child, url) = notes_server();
    let config = McpServerConfig {
        name: "notes".into(),
        url: Some(url),
        call_timeout_secs: 5,
        ..McpServerConfig::default()
    };
    let servers = McpServers::start(&[config]).await.unwrap();
    let toolbox = servers.extend(Toolbox::from_specs(Vec::new())).unwrap();
    let mut names = toolbox.names();
    names.sort();
    assert_eq!(names, ["fail", "note", "notes"]);
    let schema = toolbox.get("note").unwrap().schema();
    assert_eq!(
        schema["function"]["parameters"]["properties"]["text"]["type"], "string",
        "{schema}"
    );

    let (mut a, mut b) = (CallContext::new(), CallContext::new());
    for text in ["first", "second"] {
        let noted = toolbox.call(&mut a, "note", json!({ "text": text })).await;
        assert!(!noted.is_error, "{}", noted.text);
    }
    let seen = toolbox.call(&mut a, "notes", json!({})).await;
    assert_eq!(seen.text, "first\nsecond");
    // Chain B, at the same time, is another session with no notes.
    let other = toolbox.call(&mut b, "notes", json!({})).await;
    assert_eq!(other.text, "no notes");
    // The server's error, an observation the model reads.
    let failed = toolbox
        .call(&mut a, "fail", json!({"reason": "on purpose"}))
        .await;
    assert!(
        failed.is_error && failed.text.contains("on purpose"),
        "{failed:?}"
    );
    // A chain after A gets a fresh session, not A's notes.
    drop(a);
    let mut c = CallContext::new();
    let fresh = toolbox.call(&mut c, "notes", json!({})).await;
    assert_eq!(fresh.text, "no notes");

    // The server goes away: the chain's call is an error that ends the chain, not a hang.
    child.kill().unwrap();
    child.wait().unwrap();
    let lost = toolbox.call(&mut c, "notes", json!({})).await;
    assert!(lost.is_error, "{lost:?}");
    assert_eq!(
        lost.error_kind,
        Some(ToolErrorKind::EnvironmentLost),
        "{lost:?}"
    );
    drop((b, c));
    servers.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_tools_served_over_http_are_reached_by_an_mcp_client_until_shutdown() {
    let tools = Toolbox::from_names(&["calculator"]).unwrap();
    let pools = EnvPools::new(PoolConfig::default());
    let served = agentfly_mcp::serve_http(tools, pools, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    assert_ne!(served.addr().port(), 0);
    assert_eq!(served.url(), format!("http://{}/mcp", served.addr()));
    let config = McpServerConfig {
        name: "ours".into(),
        url: Some(served.url()),
        call_timeout_secs: 5,
        ..McpServerConfig::default()
    };
    let servers = McpServers::start(&[config]).await.unwrap();
    let toolbox = servers.extend(Toolbox::from_specs(Vec::new())).unwrap();
    assert_eq!(toolbox.names(), ["calculator"]);
    let mut ctx = CallContext::new();
    let sum = toolbox
        .call(&mut ctx, "calculator", json!({"expression": "2 + 3"}))
        .await;
    assert!(!sum.is_error && sum.text.contains('5'), "{sum:?}");
    // A tool's error comes back flagged, an observation.
    let bad = toolbox
        .call(&mut ctx, "calculator", json!({"expression": "2 +"}))
        .await;
    assert!(bad.is_error, "{bad:?}");
    // Stopped, it answers no more: the chain's call is an error, not a hang.
    served.shutdown().await;
    let gone = toolbox
        .call(&mut ctx, "calculator", json!({"expression": "1 + 1"}))
        .await;
    assert!(gone.is_error, "{gone:?}");
    drop(ctx);
    servers.close().await;
}
