//! The `agentfly` binary as a user runs it, and the README's quick start.

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

fn agentfly(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .output()
        .expect("the agentfly binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn tools_lists_every_linked_tool_and_reward() {
    let out = agentfly(&["tools"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.starts_with("9 tools:\n"), "{text}");
    assert!(
        text.contains("\n  act  [env RemoteEnv, timeout 60000 ms]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  code_interpreter  [env PythonSandbox, timeout 120000 ms]\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  calculator  [output ≤ 2000 chars]\n"),
        "{text}"
    );
    assert!(
        text.contains("      - expression (string, required) The expression to evaluate"),
        "{text}"
    );
    assert!(
        text.contains("\n  submit_answer  [terminal, output ≤ 1000 chars]\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "6 rewards: exact_match, exact_numeric, squad_exact_match, squad_f1, world_score, world_success"
        ),
        "{text}"
    );
}

#[test]
fn listings_end_quietly_when_their_reader_stops_early() {
    // `agentfly tools | head -1`: the reader is gone before the listing is written.
    for listing in ["tools", "rewards"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentfly"))
            .arg(listing)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{listing}: {:?}\n{err}", out.status);
        assert!(err.is_empty(), "{listing}: {err}");
    }
}

#[test]
fn tools_json_prints_the_schemas() {
    let out = agentfly(&["tools", "--json"]);
    assert!(out.status.success());
    let schemas: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        schemas,
        json!([
            {"type": "function", "function": {
                "name": "act",
                "description": "Takes one action in the text world, written as you would type it in the game (e.g. \"open fridge\", \"take apple from table\", \"go north\"), and shows what happens.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"command": {"type": "string", "description": "The action, in the game's own words."}},
                    "required": ["command"]}}},
            {"type": "function", "function": {
                "name": "calculator",
                "description": "Evaluates an arithmetic expression exactly and returns the result. Supports + - * / ^ (power), parentheses, unary minus, decimals and integers of any size.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"expression": {"type": "string", "description": "The expression to evaluate, e.g. \"(12 + 7) * 3\" or \"2^10 / 4\"."}},
                    "required": ["expression"]}}},
            {"type": "function", "function": {
                "name": "code_interpreter",
                "description": "Runs Python code in a persistent sandboxed interpreter, like a notebook cell: variables, imports and files persist between calls. Shows what the code prints, the value of its last expression, and any exception with its traceback. A `notepad` object (todo list, facts, draft) is predefined, and so is every other tool of the task, as a function that returns the tool's text (e.g. `search(\"Marie Curie\", k=3)`) and raises `ToolError` when the call fails.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"code": {"type": "string", "description": "The Python code to run."}},
                    "required": ["code"]}}},
            {"type": "function", "function": {
                "name": "inventory",
                "description": "Lists what you are carrying.",
                "parameters": {"type": "object", "additionalProperties": false, "properties": {}}}},
            {"type": "function", "function": {
                "name": "look",
                "description": "Looks around: describes the current room and what is in it.",
                "parameters": {"type": "object", "additionalProperties": false, "properties": {}}}},
            {"type": "function", "function": {
                "name": "retrieve",
                "description": "Reads the summary of the encyclopedia article with this exact title (as `search` lists it). An unknown title gives the closest titles.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"title": {"type": "string", "description": "The article's title."}},
                    "required": ["title"]}}},
            {"type": "function", "function": {
                "name": "search",
                "description": "Searches the encyclopedia (summaries of ~10,000 Wikipedia articles) and lists the best-matching article titles, each with a short snippet. Use `retrieve` to read one.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {
                        "query": {"type": "string", "description": "What to look for: a few keywords or a name."},
                        "k": {"type": ["integer", "null"], "format": "uint", "minimum": 0, "description": "How many results to list (1 to 10; default 3)."}},
                    "required": ["query"]}}},
            {"type": "function", "function": {
                "name": "submit_answer",
                "description": "Submits your final answer and ends the task. Call it once, when you are sure.",
                "parameters": {"type": "object", "additionalProperties": false,
                    "properties": {"answer": {"type": "string", "description": "The final answer alone, e.g. \"42\"."}},
                    "required": ["answer"]}}},
            {"type": "function", "function": {
                "name": "valid_actions",
                "description": "Lists the actions the game accepts right now (takes no step).",
                "parameters": {"type": "object", "additionalProperties": false, "properties": {}}}}
        ])
    );
}

#[test]
fn rewards_lists_fields() {
    let out = agentfly(&["rewards", "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[1]["name"], "exact_numeric");
    assert_eq!(list[1]["fields"], json!(["answer"]));
    let text = stdout(&agentfly(&["rewards"]));
    assert!(text.contains("  exact_numeric\n"), "{text}");
    assert!(text.contains("sample fields read: answer"), "{text}");
}

#[test]
fn call_prints_the_observation() {
    let out = agentfly(&["call", "calculator", r#"{"expression": "(12 + 7) * 3"}"#]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "57\n");

    let out = agentfly(&["call", "calculator", r#"{"expression": "2^100"}"#, "--json"]);
    assert!(out.status.success());
    let obs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        obs,
        json!({"text": "1267650600228229401496703205376", "is_error": false})
    );
}

#[test]
fn code_interpreter_runs_in_a_fresh_sandbox_per_call() {
    let code = json!({"code": "import os\nx = 6 * 7\nprint(sorted(os.listdir('.')))\nx"});
    let out = agentfly(&["call", "code_interpreter", &code.to_string(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(obs, json!({"text": "[]\n42", "is_error": false}));
    // Nothing survives the call: the next one starts from scratch.
    let out = agentfly(&["call", "code_interpreter", r#"{"code": "x"}"#, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let obs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(obs["is_error"], true);
    assert!(
        obs["text"]
            .as_str()
            .unwrap()
            .ends_with("NameError: name 'x' is not defined"),
        "{obs}"
    );
}

#[test]
fn a_failed_call_prints_the_error_observation_and_exits_1() {
    let out = agentfly(&[
        "call",
        "calculator",
        r#"{"expression": "1/(2-2)"}"#,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let obs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        obs,
        json!({"text": "Error from tool `calculator`: division by zero: `(2-2)` (at position 3) is 0", "is_error": true})
    );

    let out = agentfly(&["call", "calculator", "not json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("Error calling tool `calculator` (invalid JSON)"),
        "{err}"
    );

    let out = agentfly(&["call", "calc", "{}"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "Error: there is no tool named `calc`. Available tools: act, calculator, code_interpreter, inventory, look, retrieve, search, submit_answer, valid_actions.\n"
    );
}

/// The commands of the README's quick start, in order.
fn quick_start_commands() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("## Quick start")
        .nth(1)
        .expect("README has a Quick start section");
    let block = section.split("```").nth(1).expect("a code block");
    block
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn the_readme_quick_start_runs_the_main_job_then_the_tests_and_ci_runs_the_same_tests() {
    let commands = quick_start_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    // The first command is the main job: run it the way cargo would, through the binary.
    let (cargo, args) = commands[0]
        .split_once(" -- ")
        .expect("cargo run ... -- ARGS");
    assert!(cargo.starts_with("cargo run"), "{cargo}");
    let mut args: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(args, ["calculator"], "the main job");
    // The job itself takes ~17 minutes; tests/calculator.rs runs its shortened version
    // (`--smoke`) end to end. Here: the command exists and is the pipeline.
    args.push("--help");
    let out = agentfly(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = stdout(&out);
    for option in [
        "--algorithm",
        "--full",
        "--smoke",
        "--format-bonus",
        "ablate",
    ] {
        assert!(help.contains(option), "{option} not in\n{help}");
    }
    // The second is the test command: it runs every test of the workspace, and CI runs
    // exactly it.
    assert_eq!(commands[1], "scripts/test");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = std::fs::read_to_string(root.join("scripts/test")).unwrap();
    // (With the wgpu backend's feature where a Vulkan driver is: every test still runs.)
    assert!(
        script.lines().any(|l| {
            l.trim()
                .strip_prefix("cargo test --workspace")
                .is_some_and(|rest| rest.is_empty() || rest == r#" "${features[@]}""#)
        }),
        "scripts/test must run `cargo test --workspace`"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == commands[1]),
        ".ci/run must run `{}` exactly",
        commands[1]
    );
}
