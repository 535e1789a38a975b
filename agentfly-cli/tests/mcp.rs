//! `--mcp` on `agentfly tools` and `agentfly call`, with npm's reference MCP servers
//! (`scripts/setup` installs them into `.mcp/`).

use agentfly_testdata::mcp_server;
use serde_json::Value;
use std::process::{Command, Output};

fn agentfly(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .output()
        .unwrap()
}

fn server(package: &str, args: &str) -> String {
    format!("node '{}' {args}", mcp_server(package).display())
}

#[test]
fn tools_lists_a_servers_tools_in_the_openai_function_shape() {
    let out = agentfly(&["tools", "--json", "--mcp", &server("server-memory", "")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let schemas: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let create = schemas
        .iter()
        .find(|s| s["function"]["name"] == "create_entities")
        .expect("create_entities listed");
    assert_eq!(create["type"], "function");
    assert_eq!(create["function"]["parameters"]["type"], "object");
    assert!(create["function"]["description"].as_str().unwrap().len() > 10);
    // The plain listing names where the tools come from.
    let out = agentfly(&["tools", "--mcp", &server("server-memory", "")]);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(listing.contains("read_graph"), "{listing}");
}

#[test]
fn call_calls_a_servers_tool_and_exits_1_on_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "hello from a file").unwrap();
    let files = server("server-filesystem", &format!("'{}'", root.display()));
    let path = root.join("a.txt").display().to_string();
    let args = serde_json::json!({ "path": path }).to_string();
    let out = agentfly(&["call", "--mcp", &files, "read_text_file", &args, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let observation: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(observation["text"], "hello from a file");
    assert_eq!(observation["is_error"], false);
    // Outside the server's directory: its refusal, flagged, exit 1.
    let out = agentfly(&[
        "call",
        "--mcp",
        &files,
        "read_text_file",
        r#"{"path": "/etc/hostname"}"#,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let observation: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(observation["is_error"], true, "{observation}");
    // A program that is not an MCP server: a one-line reason, exit 2.
    let out = agentfly(&["tools", "--mcp", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("MCP server `true`"), "{stderr}");
}

/// What the official Python SDK saw of `agentfly mcp-serve` over `transport`.
fn sdk_sessions(transport: &str) -> Value {
    let python = agentfly_testdata::mcp_python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/sdk_client.py");
    let out = Command::new(python)
        .args([script, env!("CARGO_BIN_EXE_agentfly"), transport])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// List, call, an error flagged isError, and a stateful tool's state kept within a
/// session and not across two.
fn assert_served(seen: &Value) {
    let first = &seen["first"];
    // Listed with our schemas.
    let calculator = &first["tools"]["calculator"];
    assert_eq!(calculator["type"], "object", "{seen}");
    assert!(calculator["properties"]["expression"].is_object(), "{seen}");
    let calls = first["calls"].as_array().unwrap();
    assert_eq!(calls[0]["text"], "42");
    assert_eq!(calls[0]["is_error"], false);
    // Our error observation, flagged isError for the client.
    assert_eq!(calls[1]["is_error"], true, "{seen}");
    assert!(
        calls[1]["text"]
            .as_str()
            .unwrap()
            .contains("division by zero")
    );
    // A stateful tool keeps its environment within the session...
    assert_eq!(calls[3]["text"], "42", "{seen}");
    // ...and another session has its own.
    let again = &seen["second"]["calls"][0];
    assert!(
        again["text"].as_str().unwrap().contains("NameError"),
        "{seen}"
    );
}

#[test]
fn mcp_serve_answers_the_official_python_sdk() {
    assert_served(&sdk_sessions("stdio"));
}

#[test]
fn mcp_serve_over_streamable_http_answers_the_official_python_sdk() {
    // One server, two sessions (Mcp-Session-Id) of the SDK's streamable-HTTP client, then
    // SIGTERM: it stops cleanly.
    let seen = sdk_sessions("http");
    assert_served(&seen);
    assert_eq!(seen["exit"], 0, "{seen}");
}

/// A run of the tiny chat model (`exact_numeric` on questions with answers), its
/// configuration's path.
fn tiny_run(dir: &std::path::Path, tools: &str) -> std::path::PathBuf {
    use agentfly_testdata::support::tiny_chat::{tiny_chat_model, write_config};
    let model = tiny_chat_model(dir);
    let config = write_config(dir, &model, 1, "out");
    let lines: String = (0..4)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"question\": \"{i}+{i}?\", \"answer\": {}}}\n",
                2 * i
            )
        })
        .collect();
    std::fs::write(dir.join("train.jsonl"), &lines).unwrap();
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("odd_length", "exact_numeric")
        .replace(
            r#"tools = ["calculator", "submit_answer"]"#,
            &format!("tools = [{tools}]"),
        )
        .replace(
            "[data]\ntrain = \"train.jsonl\"",
            "[data]\ntrain = \"train.jsonl\"\neval = \"train.jsonl\"",
        );
    std::fs::write(&config, text).unwrap();
    config
}

#[test]
fn train_and_eval_take_mcp_servers_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_run(dir.path(), r#""submit_answer""#);
    let config = config.to_str().unwrap();
    let memory = server("server-memory", "");
    // One RL step with the memory server's tools in every chain's toolbox.
    let out = agentfly(&["train", "--config", config, "--mcp", &memory, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["steps"], 1, "{summary}");
    let out = agentfly(&["eval", "--config", config, "--mcp", &memory, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["samples"], 4, "{report}");

    // A program that is not an MCP server is refused at the start, naming it.
    let out = agentfly(&["train", "--config", config, "--mcp", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("MCP server `true`"), "{stderr}");
    // A line that is no command at all, before anything starts.
    let out = agentfly(&["train", "--config", config, "--mcp", "'unclosed"]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unbalanced quotes"), "{stderr}");
}

#[test]
fn a_served_tool_named_like_a_registered_one_is_refused_naming_both() {
    // agentfly's own MCP server, serving `calculator`, beside a run whose tools have one.
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_run(dir.path(), r#""calculator", "submit_answer""#);
    let ours = format!(
        "'{}' mcp-serve --tools calculator",
        env!("CARGO_BIN_EXE_agentfly")
    );
    let out = agentfly(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--mcp",
        &ours,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("two tools are named `calculator`")
            && stderr.contains("MCP server `agentfly`"),
        "{stderr}"
    );
}
