//! MCP servers' tools in agentfly's toolbox, against servers no one here wrote — npm's
//! `@modelcontextprotocol/server-memory` (stateful: a knowledge graph) and
//! `-filesystem` (on a temporary directory), installed into `.mcp/` by `scripts/setup` —
//! and against a deliberately faulty one (`tests/servers/faulty.mjs`, on the official
//! TypeScript SDK) that fails, hangs, writes garbage and crashes.

agentfly_core::link!(agentfly_tools, agentfly_envs);

use agentfly_core::tool::ToolErrorKind;
use agentfly_core::{CallContext, Observation, Toolbox};
use agentfly_mcp::{McpServerConfig, McpServers};
use agentfly_testdata::{mcp_server, repo};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn node_server(name: &str, script: String, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        command: Some("node".into()),
        args: std::iter::once(script)
            .chain(args.iter().map(|a| a.to_string()))
            .collect(),
        ..McpServerConfig::default()
    }
}

/// The memory server, each session keeping its graph in its own directory.
fn memory() -> McpServerConfig {
    let mut config = node_server(
        "memory",
        mcp_server("server-memory").display().to_string(),
        &[],
    );
    config.env = BTreeMap::from([(
        "MEMORY_FILE_PATH".to_string(),
        "{session_dir}/memory.jsonl".to_string(),
    )]);
    config
}

fn faulty(args: &[&str]) -> McpServerConfig {
    // The reference servers' SDK, which the faulty server imports too.
    mcp_server("server-memory");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers/faulty.mjs");
    let mut config = node_server("faulty", script.to_string(), args);
    config.env = BTreeMap::from([(
        "AGENTFLY_MCP_NODE_MODULES".to_string(),
        repo().join(".mcp/node_modules").display().to_string(),
    )]);
    config.call_timeout_secs = 3;
    config
}

async fn call(toolbox: &Toolbox, ctx: &mut CallContext, name: &str, args: Value) -> Observation {
    toolbox.call(ctx, name, args).await
}

async fn toolbox(servers: &McpServers) -> Toolbox {
    servers.extend(Toolbox::from_specs(Vec::new())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_servers_tools_join_and_no_chain_sees_anothers_graph() {
    let servers = McpServers::start(&[memory()]).await.unwrap();
    let toolbox = toolbox(&servers).await;
    let names = toolbox.names();
    for expected in ["create_entities", "read_graph", "search_nodes"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    // The server's schema and description, in the OpenAI function shape.
    let schema = toolbox.get("create_entities").unwrap().schema();
    assert_eq!(schema["function"]["parameters"]["type"], "object");
    assert!(
        schema["function"]["parameters"]["properties"]["entities"].is_object(),
        "{schema}"
    );
    assert!(
        !schema["function"]["description"]
            .as_str()
            .unwrap()
            .is_empty()
    );

    let alice = json!({"entities": [
        {"name": "Alice", "entityType": "person", "observations": ["likes tea"]}
    ]});
    let mut a = CallContext::new();
    let mut b = CallContext::new();
    let created = call(&toolbox, &mut a, "create_entities", alice).await;
    assert!(!created.is_error, "{}", created.text);
    // Chain A keeps its state across its turns; chain B, at the same time, has its own.
    let seen = call(&toolbox, &mut a, "read_graph", json!({})).await;
    assert!(seen.text.contains("Alice"), "{}", seen.text);
    let other = call(&toolbox, &mut b, "read_graph", json!({})).await;
    assert!(
        !other.is_error && !other.text.contains("Alice"),
        "{}",
        other.text
    );
    // After chain A ends, the next chain gets a fresh session, not A's graph.
    drop(a);
    drop(b);
    let mut c = CallContext::new();
    let fresh = call(&toolbox, &mut c, "read_graph", json!({})).await;
    assert!(
        !fresh.is_error && !fresh.text.contains("Alice"),
        "{}",
        fresh.text
    );
    drop(c);
    servers.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_server_works_in_its_directory_and_its_refusals_are_observations() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "the answer is 42\n").unwrap();
    let mut config = node_server(
        "files",
        mcp_server("server-filesystem").display().to_string(),
        &[root.to_str().unwrap()],
    );
    config.tools = Some(vec![
        "read_text_file".into(),
        "write_file".into(),
        "list_directory".into(),
    ]);
    let servers = McpServers::start(&[config]).await.unwrap();
    let toolbox = toolbox(&servers).await;
    assert_eq!(
        toolbox.names(),
        ["read_text_file", "write_file", "list_directory"]
    );
    let mut ctx = CallContext::new();
    let path = |name: &str| root.join(name).display().to_string();
    let read = call(
        &toolbox,
        &mut ctx,
        "read_text_file",
        json!({"path": path("notes.txt")}),
    )
    .await;
    assert_eq!(read.text.trim(), "the answer is 42", "{read:?}");
    let wrote = call(
        &toolbox,
        &mut ctx,
        "write_file",
        json!({"path": path("out.txt"), "content": "written by a tool"}),
    )
    .await;
    assert!(!wrote.is_error, "{}", wrote.text);
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).unwrap(),
        "written by a tool"
    );
    let listed = call(
        &toolbox,
        &mut ctx,
        "list_directory",
        json!({"path": path("")}),
    )
    .await;
    assert!(listed.text.contains("out.txt"), "{}", listed.text);
    // Outside its directory the server refuses: an error observation the model reads.
    let refused = call(
        &toolbox,
        &mut ctx,
        "read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(refused.is_error, "{refused:?}");
    assert_eq!(
        refused.error_kind,
        Some(ToolErrorKind::ToolError),
        "{refused:?}"
    );
    assert!(refused.text.contains("read_text_file"), "{}", refused.text);
    drop(ctx);
    servers.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hanging_garbled_or_crashing_server_loses_only_that_session() {
    let mut config = faulty(&[]);
    config.max_sessions = 2;
    let servers = McpServers::start(&[config]).await.unwrap();
    let toolbox = toolbox(&servers).await;
    let mut ctx = CallContext::new();
    let echo = call(&toolbox, &mut ctx, "echo", json!({"text": "hi"})).await;
    assert_eq!(echo.text, "echo: hi");
    // isError: an observation the model reads; the session lives on.
    let failed = call(&toolbox, &mut ctx, "fail", json!({})).await;
    assert!(
        failed.is_error && failed.text.contains("always fails"),
        "{failed:?}"
    );
    assert_eq!(failed.error_kind, Some(ToolErrorKind::ToolError));
    // Arguments that are not an object never reach the server.
    let bad = call(&toolbox, &mut ctx, "echo", json!([1, 2])).await;
    assert_eq!(
        bad.error_kind,
        Some(ToolErrorKind::InvalidArguments),
        "{bad:?}"
    );
    for tool in ["hang", "garbage", "crash"] {
        let started = std::time::Instant::now();
        let lost = call(&toolbox, &mut ctx, tool, json!({})).await;
        assert_eq!(
            lost.error_kind,
            Some(ToolErrorKind::EnvironmentLost),
            "{tool}: {lost:?}"
        );
        assert!(lost.text.contains("faulty"), "{tool}: {}", lost.text);
        assert!(
            started.elapsed().as_secs() < 8,
            "{tool} took {:?}",
            started.elapsed()
        );
        // The pool replaced the session: the next call works.
        let again = call(&toolbox, &mut ctx, "echo", json!({"text": tool})).await;
        assert_eq!(again.text, format!("echo: {tool}"), "after {tool}");
    }
    drop(ctx);
    servers.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_cannot_be_used_are_refused_at_start_naming_why() {
    let expect = |result: Result<McpServers, agentfly_mcp::McpError>, says: &[&str]| {
        let message = result.unwrap_err().to_string();
        for part in says {
            assert!(message.contains(part), "`{part}` not in: {message}");
        }
    };
    // A program that is not an MCP server: it exits, or it never answers.
    let exits = McpServerConfig::from_command_line("true").unwrap();
    expect(McpServers::start(&[exits]).await, &["`true`", "handshake"]);
    let mut silent = McpServerConfig::from_command_line("sleep 60").unwrap();
    silent.start_timeout_secs = 2;
    expect(
        McpServers::start(&[silent]).await,
        &["sleep 60", "is it an MCP server?"],
    );
    let missing = McpServerConfig::from_command_line("/no/such/program").unwrap();
    expect(McpServers::start(&[missing]).await, &["cannot start"]);
    let mut nowhere = faulty(&[]);
    nowhere.cwd = Some("/no/such/dir".into());
    expect(
        McpServers::start(&[nowhere]).await,
        &["`cwd` /no/such/dir is not a directory"],
    );
    // A server with no tools, one whose schema no call format can fill, a tool it lacks.
    expect(
        McpServers::start(&[faulty(&["--no-tools"])]).await,
        &["lists no tools"],
    );
    expect(
        McpServers::start(&[faulty(&["--bad-schema"])]).await,
        &["`listy`", "not a JSON Schema of an object"],
    );
    let mut picky = faulty(&[]);
    picky.tools = Some(vec!["nope".into()]);
    expect(
        McpServers::start(&[picky]).await,
        &["no tool `nope`", "echo"],
    );
    // A tool whose name a registered tool (or another server's) already has.
    let servers = McpServers::start(&[faulty(&[])]).await.unwrap();
    let mut copy = faulty(&[]);
    copy.name = "faulty-2".into();
    let copies = McpServers::start(&[copy]).await.unwrap();
    let clash = copies
        .extend(servers.extend(Toolbox::from_specs(Vec::new())).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        clash.contains("two tools are named `echo`")
            && clash.contains("MCP server `faulty`")
            && clash.contains("MCP server `faulty-2`"),
        "{clash}"
    );
    servers.close().await;
    copies.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_git_answers_about_a_repository_the_test_made() {
    let dir = tempfile::tempdir().unwrap();
    let repo_dir = dir.path().canonicalize().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo_dir)
            .env("GIT_AUTHOR_NAME", "Ada Lovelace")
            .env("GIT_AUTHOR_EMAIL", "ada@example.org")
            .env("GIT_COMMITTER_NAME", "Ada Lovelace")
            .env("GIT_COMMITTER_EMAIL", "ada@example.org")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    std::fs::write(repo_dir.join("engine.txt"), "analytical\n").unwrap();
    git(&["add", "engine.txt"]);
    git(&["commit", "-q", "-m", "Describe the analytical engine"]);
    // Run in the repository (`cwd`), so `--repository .` and a `repo_path` of "." name it
    // (in a session directory of its own, "." would be refused as outside the repository).
    let config = McpServerConfig {
        name: "git".into(),
        command: Some(agentfly_testdata::mcp_python().display().to_string()),
        args: vec![
            "-m".into(),
            "mcp_server_git".into(),
            "--repository".into(),
            ".".into(),
        ],
        cwd: Some(repo_dir.clone()),
        ..McpServerConfig::default()
    };
    let servers = McpServers::start(&[config]).await.unwrap();
    let toolbox = toolbox(&servers).await;
    assert!(
        toolbox.names().contains(&"git_log"),
        "{:?}",
        toolbox.names()
    );
    let mut ctx = CallContext::new();
    let log = call(&toolbox, &mut ctx, "git_log", json!({"repo_path": "."})).await;
    assert!(!log.is_error, "{}", log.text);
    assert!(
        log.text.contains("Describe the analytical engine") && log.text.contains("Ada Lovelace"),
        "{}",
        log.text
    );
    // Outside the repository it was given: refused, an observation.
    let outside = call(&toolbox, &mut ctx, "git_status", json!({"repo_path": "/"})).await;
    assert!(outside.is_error, "{outside:?}");
    drop(ctx);
    servers.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_code_as_action_an_mcp_tool_is_a_python_function() {
    let servers = McpServers::start(&[memory()]).await.unwrap();
    let toolbox = servers
        .extend(Toolbox::from_names(&["code_interpreter"]).unwrap())
        .unwrap();
    let pools = agentfly_core::env::EnvPools::new(agentfly_core::env::PoolConfig::default());
    let mut ctx = CallContext::with_pools(pools.clone());
    let code = "create_entities(entities=[{'name': 'Bob', 'entityType': 'person', \
                'observations': ['rides a bike']}])\nprint(read_graph())";
    let out = call(
        &toolbox,
        &mut ctx,
        "code_interpreter",
        json!({"code": code}),
    )
    .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(out.text.contains("rides a bike"), "{}", out.text);
    drop(ctx);
    pools.close().await;
    servers.close().await;
}
