//! `#[tool]` end to end: schemas, calls with good and bad arguments, sync and async,
//! `Err` results, panics, timeouts, truncation, terminal tools and environments.

use agentfly_core::schemars::JsonSchema;
use agentfly_core::{CallContext, Observation, ToolErrorKind, Toolbox, tool};
use serde::Deserialize;
use serde_json::json;
use std::time::{Duration, Instant};

/// Adds two numbers.
#[tool]
fn add(
    /// The first addend.
    a: f64,
    /// The second addend.
    b: f64,
) -> f64 {
    a + b
}

/// A point on a map.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "agentfly_core::schemars")]
struct Point {
    /// Latitude in degrees.
    lat: f64,
    /// Longitude in degrees.
    lon: f64,
}

/// Finds places near a point.
///
/// Results are sorted by distance.
#[tool(name = "find_places", max_output_chars = 40, timeout_ms = 5000)]
async fn find(
    /// What to look for.
    query: &str,
    /// Where to look.
    near: Point,
    /// How many results (default 3).
    limit: Option<u32>,
    #[serde(default)] verbose: bool,
) -> Result<String, String> {
    if query.is_empty() {
        return Err("the query is empty".to_string());
    }
    let limit = limit.unwrap_or(3);
    let mut out = format!("{limit} x {query} near ({}, {})", near.lat, near.lon);
    if verbose {
        out.push_str(&" and many more details".repeat(5));
    }
    Ok(out)
}

/// Always panics.
#[tool]
fn boom() -> String {
    panic!("the tool blew up")
}

/// Panics after awaiting.
#[tool]
async fn async_boom(
    /// Anything.
    text: String,
) -> Observation {
    tokio::task::yield_now().await;
    panic!("async tool blew up with {text}")
}

/// Sleeps without yielding.
#[tool(timeout_ms = 100)]
fn slow_sync(
    /// How long to block, in milliseconds.
    ms: u64,
) -> String {
    std::thread::sleep(Duration::from_millis(ms));
    "woke up".to_string()
}

/// Sleeps asynchronously.
#[tool(timeout_ms = 100)]
async fn slow_async(
    /// How long to sleep, in milliseconds.
    ms: u64,
) -> &'static str {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    "woke up"
}

/// Ends the episode.
#[tool(terminal)]
fn finish(
    /// The final answer.
    answer: String,
) -> Result<String, std::io::Error> {
    if answer == "fail" {
        return Err(std::io::Error::other("could not record it"));
    }
    Ok(format!("recorded {answer}"))
}

/// A counter that lives as long as a chain.
#[derive(Default)]
struct Counter {
    total: i64,
}

agentfly_core::default_env!(Counter);

/// Adds to the chain's counter (async).
#[tool(env = Counter)]
async fn count(
    counter: &mut Counter,
    /// How much to add.
    by: i64,
) -> String {
    counter.total += by;
    counter.total.to_string()
}

/// Adds to the chain's counter (sync).
#[tool(env = Counter)]
fn count_sync(
    counter: &mut Counter,
    /// How much to add.
    by: i64,
) -> i64 {
    counter.total += by;
    counter.total
}

/// Takes no arguments.
#[tool]
fn ping() {}

fn toolbox() -> Toolbox {
    Toolbox::all().expect("no duplicate tool names")
}

#[test]
fn schemas_are_openai_function_schemas_with_inlined_subschemas_in_declaration_order() {
    let toolbox = Toolbox::from_names(&["add", "find_places", "ping", "count"]).unwrap();
    let schemas = toolbox.schemas();
    assert_eq!(
        schemas[0],
        json!({"type": "function", "function": {
            "name": "add",
            "description": "Adds two numbers.",
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "a": {"type": "number", "format": "double", "description": "The first addend."},
                    "b": {"type": "number", "format": "double", "description": "The second addend."}
                },
                "required": ["a", "b"]
            }
        }})
    );
    assert_eq!(
        schemas[1],
        json!({"type": "function", "function": {
            "name": "find_places",
            "description": "Finds places near a point.\n\nResults are sorted by distance.",
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "near": {
                        "type": "object",
                        "description": "Where to look.",
                        "properties": {
                            "lat": {"type": "number", "format": "double", "description": "Latitude in degrees."},
                            "lon": {"type": "number", "format": "double", "description": "Longitude in degrees."}
                        },
                        "required": ["lat", "lon"]
                    },
                    "limit": {
                        "type": ["integer", "null"], "format": "uint32", "minimum": 0,
                        "description": "How many results (default 3)."
                    },
                    "verbose": {"type": "boolean", "default": false}
                },
                "required": ["query", "near"]
            }
        }})
    );
    assert!(!schemas.iter().any(|s| s.to_string().contains("$ref")));
    assert_eq!(
        schemas[2]["function"]["parameters"],
        json!({"type": "object", "additionalProperties": false, "properties": {}})
    );
    // The environment parameter is not an argument.
    assert_eq!(
        schemas[3]["function"]["parameters"]["properties"],
        json!({"by": {"type": "integer", "format": "int64", "description": "How much to add."}})
    );
}

#[test]
fn the_registry_finds_tools_by_name_and_names_the_known_ones() {
    let toolbox = Toolbox::from_names(&["ping", "add"]).unwrap();
    assert_eq!(toolbox.names(), ["ping", "add"]);
    let err = Toolbox::from_names(&["add", "multiply"])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("unknown tool `multiply`; the linked tools are: add, async_boom, boom,"),
        "{err}"
    );
    let all = toolbox_names();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "Toolbox::all() is sorted by name");
    let spec = toolbox.get("add").unwrap();
    assert!(
        spec.origin.file.ends_with("tests/tools.rs"),
        "{}",
        spec.origin
    );
    assert_eq!(spec.origin.module_path, "tools");
}

fn toolbox_names() -> Vec<&'static str> {
    toolbox().names()
}

#[tokio::test]
async fn good_calls_sync_and_async() {
    let tb = toolbox();
    assert_eq!(
        tb.call_json("add", r#"{"a": 2, "b": 0.5}"#).await,
        Observation::text("2.5")
    );
    let near = r#"{"query": "cafe", "near": {"lat": 1.5, "lon": 2}}"#;
    assert_eq!(
        tb.call_json("find_places", near).await.text,
        "3 x cafe near (1.5, 2)"
    );
    let with_limit = r#"{"query": "cafe", "near": {"lat": 1, "lon": 2}, "limit": 5}"#;
    assert_eq!(
        tb.call_json("find_places", with_limit).await.text,
        "5 x cafe near (1, 2)"
    );
    let null_limit = r#"{"query": "cafe", "near": {"lat": 1, "lon": 2}, "limit": null}"#;
    assert_eq!(
        tb.call_json("find_places", null_limit).await.text,
        "3 x cafe near (1, 2)"
    );
    assert_eq!(tb.call_json("ping", "").await.text, "done");
    assert_eq!(tb.call_json("ping", "null").await.text, "done");
    // Arguments encoded twice, as some models send them.
    let twice = serde_json::to_string(r#"{"a": 1, "b": 2}"#).unwrap();
    assert_eq!(tb.call_json("add", &twice).await.text, "3");
}

fn assert_error(obs: &Observation, kind: ToolErrorKind, expected: &str) {
    assert!(obs.is_error, "{obs:?}");
    assert_eq!(obs.error_kind, Some(kind), "{obs:?}");
    assert_eq!(obs.text, expected);
    assert!(!obs.terminal);
}

#[tokio::test]
async fn bad_arguments_become_error_observations_naming_the_problem() {
    let tb = toolbox();
    assert_error(
        &tb.call_json("add", r#"{"a": 1"#).await,
        ToolErrorKind::InvalidJson,
        "Error calling tool `add` (invalid JSON): the arguments are not valid JSON (EOF while parsing an object at line 1 column 7); send one JSON object",
    );
    assert_error(
        &tb.call_json("add", r#"{"a": 1}"#).await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `add` (invalid arguments): missing field `b`",
    );
    assert_error(
        &tb.call_json("add", r#"{"a": 1, "b": "two"}"#).await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `add` (invalid arguments): argument `b`: invalid type: string \"two\", expected f64",
    );
    assert_error(
        &tb.call_json("add", r#"{"a": 1, "b": 2, "c": 3}"#).await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `add` (invalid arguments): unknown field `c`, expected `a` or `b`",
    );
    assert_error(
        &tb.call_json("add", "[1, 2]").await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `add` (invalid arguments): the arguments must be a JSON object of named arguments, not an array",
    );
    assert_error(
        &tb.call_json("find_places", r#"{"query": "x", "near": {"lat": 1}}"#)
            .await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `find_places` (invalid arguments): argument `near`: missing field `lon`",
    );
    assert_error(
        &tb.call_json(
            "find_places",
            r#"{"query": "x", "near": {"lat": 1, "lon": true}}"#,
        )
        .await,
        ToolErrorKind::InvalidArguments,
        "Error calling tool `find_places` (invalid arguments): argument `near.lon`: invalid type: boolean `true`, expected f64",
    );
    let unknown = tb.call_json("multiply", "{}").await;
    assert_eq!(unknown.error_kind, Some(ToolErrorKind::UnknownTool));
    assert!(
        unknown
            .text
            .starts_with("Error: there is no tool named `multiply`. Available tools: add, "),
        "{}",
        unknown.text
    );
}

#[tokio::test]
async fn an_err_result_is_an_error_observation() {
    let tb = toolbox();
    assert_error(
        &tb.call_json(
            "find_places",
            r#"{"query": "", "near": {"lat": 0, "lon": 0}}"#,
        )
        .await,
        ToolErrorKind::ToolError,
        "Error from tool `find_places`: the query is empty",
    );
}

#[tokio::test]
async fn panics_sync_and_async_end_the_call_not_the_run() {
    let tb = toolbox();
    assert_error(
        &tb.call_json("boom", "{}").await,
        ToolErrorKind::Panicked,
        "Error calling tool `boom` (panicked): the tool panicked: the tool blew up",
    );
    assert_error(
        &tb.call_json("async_boom", r#"{"text": "x"}"#).await,
        ToolErrorKind::Panicked,
        "Error calling tool `async_boom` (panicked): the tool panicked: async tool blew up with x",
    );
    // The toolbox still works afterwards.
    assert_eq!(tb.call_json("add", r#"{"a": 1, "b": 1}"#).await.text, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_cancel_sync_and_async_tools() {
    let tb = toolbox();
    for name in ["slow_sync", "slow_async"] {
        let started = Instant::now();
        let obs = tb.call_json(name, r#"{"ms": 1500}"#).await;
        assert_error(
            &obs,
            ToolErrorKind::TimedOut,
            &format!(
                "Error calling tool `{name}` (timed out): timed out after 100 ms and was cancelled"
            ),
        );
        assert!(
            started.elapsed() < Duration::from_millis(1200),
            "{name} was not cut off"
        );
        assert_eq!(tb.call_json(name, r#"{"ms": 1}"#).await.text, "woke up");
    }
    // The toolbox default applies to tools without their own timeout.
    let quick = toolbox().with_default_timeout(Duration::from_millis(50));
    let obs = quick.call_json("ping", "{}").await;
    assert!(!obs.is_error);
}

#[tokio::test]
async fn long_output_is_truncated_with_a_visible_marker() {
    let tb = toolbox();
    let args = r#"{"query": "tea", "near": {"lat": 0, "lon": 0}, "verbose": true}"#;
    let obs = tb.call_json("find_places", args).await;
    assert!(obs.truncated);
    assert!(!obs.is_error);
    assert_eq!(
        obs.text,
        "3 x tea near (0, 0) and many more detail\n[output truncated: showing 40 of 129 characters]"
    );
}

#[tokio::test]
async fn a_terminal_tool_ends_the_chain_only_when_it_succeeds() {
    let tb = toolbox();
    let ok = tb.call_json("finish", r#"{"answer": "42"}"#).await;
    assert!(ok.terminal && !ok.is_error);
    assert_eq!(ok.text, "recorded 42");
    let failed = tb.call_json("finish", r#"{"answer": "fail"}"#).await;
    assert!(!failed.terminal && failed.is_error);
    assert_eq!(failed.text, "Error from tool `finish`: could not record it");
    let bad = tb.call_json("finish", "{}").await;
    assert!(!bad.terminal);
    assert!(!tb.call_json("add", r#"{"a": 1, "b": 1}"#).await.terminal);
}

#[tokio::test]
async fn stateful_tools_share_the_chains_environment() {
    let tb = toolbox();
    let mut ctx = CallContext::new();
    ctx.insert_env(Counter::default());
    assert_eq!(
        tb.call_json_in(&mut ctx, "count", r#"{"by": 2}"#)
            .await
            .text,
        "2"
    );
    assert_eq!(
        tb.call_json_in(&mut ctx, "count_sync", r#"{"by": 5}"#)
            .await
            .text,
        "7"
    );
    assert_eq!(
        tb.call_json_in(&mut ctx, "count", r#"{"by": -1}"#)
            .await
            .text,
        "6"
    );
    assert_eq!(ctx.env_mut::<Counter>().unwrap().total, 6);

    // Another chain has its own instance.
    let mut other = CallContext::new();
    other.insert_env(Counter::default());
    assert_eq!(
        tb.call_json_in(&mut other, "count", r#"{"by": 1}"#)
            .await
            .text,
        "1"
    );

    // Without an instance the call fails clearly, sync and async.
    for name in ["count", "count_sync"] {
        let obs = tb.call_json(name, r#"{"by": 1}"#).await;
        assert_eq!(obs.error_kind, Some(ToolErrorKind::MissingEnvironment));
        assert!(
            obs.text
                .contains("needs an environment of type `tools::Counter`"),
            "{}",
            obs.text
        );
    }
}

#[test]
fn blocking_calls_work_outside_a_runtime() {
    let obs = toolbox().call_json_blocking("add", r#"{"a": 40, "b": 2}"#);
    assert_eq!(obs.text, "42");
}

#[test]
fn observations_serialize_for_logs() {
    let obs = Observation::error(ToolErrorKind::TimedOut, "late");
    assert_eq!(
        serde_json::to_value(&obs).unwrap(),
        json!({"text": "late", "is_error": true, "error_kind": "timed_out", "terminal": false, "truncated": false})
    );
}
