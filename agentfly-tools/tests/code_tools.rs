//! Every tool callable from code: inside the chain's `PythonSandbox` the toolbox's tools
//! are Python functions with their parameters and docstrings, run in Rust, bounded, and
//! recorded as calls. Then the hostile part: code that talks to the channel directly
//! reaches nothing but the chain's own tools, within their limits.

use agentfly_core::tool::{BridgeLimits, ToolErrorKind};
use agentfly_core::{CallContext, Toolbox, tool};
use agentfly_envs::{PythonSandbox, SandboxConfig};
use agentfly_tools as _;
use serde_json::json;
use std::time::Duration;

/// Sleeps far past its own timeout.
#[tool(timeout_ms = 200)]
async fn sleepy() -> String {
    tokio::time::sleep(Duration::from_secs(30)).await;
    "late".into()
}

/// Always panics.
#[tool]
fn explode(
    /// Ignored.
    why: String,
) -> String {
    panic!("boom: {why}")
}

fn config() -> SandboxConfig {
    SandboxConfig {
        call_timeout: Duration::from_secs(5),
        tool_calls: BridgeLimits {
            max_calls: 5,
            max_argument_bytes: 1000,
        },
        ..SandboxConfig::default()
    }
}

/// A chain's context with a sandbox of its own and `tools` as its toolbox.
async fn chain(tools: &[&str]) -> (Toolbox, CallContext) {
    let toolbox = Toolbox::from_names(tools).unwrap();
    let mut ctx = CallContext::new();
    ctx.insert_env(PythonSandbox::start(config()).await.unwrap());
    ctx.set_toolbox(toolbox.clone());
    (toolbox, ctx)
}

async fn run(toolbox: &Toolbox, ctx: &mut CallContext, code: &str) -> agentfly_core::Observation {
    toolbox
        .call(ctx, "code_interpreter", json!({ "code": code }))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_python_functions_that_run_in_rust() {
    let (toolbox, mut ctx) = chain(&["code_interpreter", "calculator", "submit_answer"]).await;
    let out = run(&toolbox, &mut ctx, "x = calculator('12 * (3 + 4)')\nx").await;
    assert_eq!(
        (out.text.as_str(), out.is_error),
        ("'84'", false),
        "{out:?}"
    );
    let nested = ctx.take_nested_calls();
    assert_eq!(nested.len(), 1);
    assert_eq!(
        (nested[0].via, nested[0].name.as_str(), &nested[0].arguments),
        (
            "code_interpreter",
            "calculator",
            &json!({"expression": "12 * (3 + 4)"})
        )
    );

    // The signature and the docstring are the tool's; keyword arguments work.
    let out = run(
        &toolbox,
        &mut ctx,
        "import inspect\nprint(inspect.signature(calculator))\nprint(calculator.__doc__.splitlines()[0][:40])\ncalculator(expression='2^10')",
    )
    .await;
    assert!(out.text.starts_with("(expression)\n"), "{}", out.text);
    assert!(out.text.ends_with("'1024'"), "{}", out.text);
    let description = toolbox.get("calculator").unwrap().description;
    assert!(out.text.contains(&description[..20]), "{}", out.text);

    // A failing call raises ToolError with the tool's message; code can catch it.
    let out = run(
        &toolbox,
        &mut ctx,
        "try:\n    calculator('1/0')\nexcept ToolError as e:\n    print('caught:', e)",
    )
    .await;
    assert!(
        out.text.starts_with("caught: Error from tool `calculator`"),
        "{}",
        out.text
    );
    // Uncaught, its traceback shows the cell's frames (its own function's too), none of the
    // kernel's wrapper around the tool.
    let out = run(
        &toolbox,
        &mut ctx,
        "def twice(e):\n    return calculator(e) * 2\ntwice('1/0')",
    )
    .await;
    assert!(out.is_error, "{out:?}");
    for shown in [
        "File \"<cell>\", line 3, in <module>",
        "File \"<cell>\", line 2, in twice",
        "ToolError: Error from tool `calculator`",
    ] {
        assert!(out.text.contains(shown), "{shown}: {}", out.text);
    }
    for hidden in ["call_tool", "in tool", "<string>"] {
        assert!(!out.text.contains(hidden), "{hidden}: {}", out.text);
    }
    drop(ctx.take_nested_calls());
    // A wrong signature is Python's TypeError, before anything reaches Rust.
    let out = run(&toolbox, &mut ctx, "calculator()").await;
    assert!(
        out.is_error && out.text.contains("TypeError"),
        "{}",
        out.text
    );
    assert!(
        out.text
            .contains("missing a required argument: 'expression'"),
        "{}",
        out.text
    );
    drop(ctx.take_nested_calls());

    // The tool that runs the code is not offered to it, nor is its state reachable.
    let out = run(&toolbox, &mut ctx, "'code_interpreter' in dir()").await;
    assert_eq!(out.text, "False");
    // Variables persist between cells next to the functions.
    let out = run(&toolbox, &mut ctx, "x").await;
    assert_eq!(out.text, "'84'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_tool_called_from_code_is_recorded_as_such() {
    let (toolbox, mut ctx) = chain(&["code_interpreter", "submit_answer"]).await;
    let out = run(&toolbox, &mut ctx, "submit_answer('Paris')").await;
    assert!(!out.is_error, "{out:?}");
    let nested = ctx.take_nested_calls();
    assert_eq!(nested.len(), 1);
    assert!(nested[0].observation.terminal, "{nested:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_tools_end_their_call_not_the_cell() {
    let (toolbox, mut ctx) = chain(&["code_interpreter", "sleepy", "explode"]).await;
    let out = run(
        &toolbox,
        &mut ctx,
        "r = []\nfor f in (lambda: sleepy(), lambda: explode('x')):\n    try:\n        f()\n    except ToolError as e:\n        r.append(str(e))\nprint(*r, sep='\\n')\n'still here'",
    )
    .await;
    let lines: Vec<&str> = out.text.lines().collect();
    assert!(lines[0].contains("timed out after 200 ms"), "{}", out.text);
    assert!(lines[1].contains("panicked: boom: x"), "{}", out.text);
    assert_eq!(lines[2], "'still here'");
    let kinds: Vec<_> = ctx
        .take_nested_calls()
        .iter()
        .map(|c| c.observation.error_kind)
        .collect();
    assert_eq!(
        kinds,
        [Some(ToolErrorKind::TimedOut), Some(ToolErrorKind::Panicked)]
    );
}

/// Sends a raw call on the kernel's channel to its supervisor, as hostile code can (the
/// kernel's globals are reachable through any tool function's), and returns the answer.
const RAW_CALL: &str = r#"import json
K = calculator.__globals__
def raw(tool, args):
    call = {"op": "call", "tool": tool, "args": args, "seq": K['CALLS']['seq']}
    K['CHANNEL'].sendall((json.dumps(call) + "\n").encode())
    return json.loads(K['CHANNEL_IN'].readline())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_code_reaches_only_the_chains_tools_within_limits() {
    let (toolbox, mut ctx) = chain(&["code_interpreter", "calculator"]).await;
    let out = run(&toolbox, &mut ctx, RAW_CALL).await;
    assert!(!out.is_error, "{out:?}");

    // Itself (recursion, a second sandbox), and tools outside the chain's toolbox.
    for tool in [
        "code_interpreter",
        "retrieve",
        "submit_answer",
        "no_such_tool",
    ] {
        let out = run(
            &toolbox,
            &mut ctx,
            &format!("raw({tool:?}, {{'code': '1'}})"),
        )
        .await;
        assert!(
            out.text.contains("'is_error': True"),
            "{tool}: {}",
            out.text
        );
        assert!(
            out.text.contains("Available: calculator."),
            "{tool}: {}",
            out.text
        );
    }
    // Arguments over the size limit, and more calls than allowed in one cell.
    let out = run(
        &toolbox,
        &mut ctx,
        "raw('calculator', {'expression': '1+' * 600 + '1'})",
    )
    .await;
    assert!(out.text.contains("the limit is 1000"), "{}", out.text);
    let refused: Vec<_> = ctx.take_nested_calls();
    assert_eq!(refused.len(), 5, "every call is recorded, refused ones too");
    assert!(refused.iter().all(|c| c.observation.is_error));
    let out = run(
        &toolbox,
        &mut ctx,
        "[calculator('1+1') for _ in range(5)]\ncalculator('2+2')",
    )
    .await;
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.contains("too many tool calls"), "{}", out.text);
    let made = ctx.take_nested_calls();
    assert_eq!(made.len(), 6);
    assert!(made[..5].iter().all(|c| !c.observation.is_error));
    assert_eq!(made[5].observation.error_kind, Some(ToolErrorKind::Refused));

    // A message without end on the channel: the interpreter is restarted, the host fine.
    let out = run(
        &toolbox,
        &mut ctx,
        "K['CHANNEL'].sendall(b'x' * (20 << 20))",
    )
    .await;
    assert!(
        out.is_error && out.text.contains("over 16777216 bytes"),
        "{}",
        out.text
    );
    let out = run(&toolbox, &mut ctx, "calculator('6*7')").await;
    assert_eq!(out.text, "'42'");
    // The interpreter was replaced: the helper is defined again.
    run(&toolbox, &mut ctx, RAW_CALL).await;

    // Garbage instead of an answer: restarted, nothing else happens.
    let out = run(&toolbox, &mut ctx, "K['CHANNEL'].sendall(b'not json\\n')").await;
    assert!(
        out.is_error && out.text.contains("not a JSON object"),
        "{}",
        out.text
    );

    // A forked child cannot call tools through the kernel's function.
    let out = run(
        &toolbox,
        &mut ctx,
        "import os\npid = os.fork()\nif pid == 0:\n    try:\n        calculator('1+1')\n    except ToolError as e:\n        print('child:', e, flush=True)\n    os._exit(0)\nos.waitpid(pid, 0)\nNone",
    )
    .await;
    assert!(
        out.text.contains(
            "child: calculator: tools can be called only from the notebook's own process"
        ),
        "{}",
        out.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_waits_on_tools_is_timed_on_its_own_time() {
    // Three calls of a tool that takes 200 ms, in a cell allowed 5 s of Python time: the
    // tools' time is their own (bounded by their timeouts), not the cell's.
    let (toolbox, mut ctx) = chain(&["code_interpreter", "sleepy"]).await;
    let out = run(
        &toolbox,
        &mut ctx,
        "import time\nt = time.time()\nfor _ in range(3):\n    try: sleepy()\n    except ToolError: pass\nround(time.time() - t)",
    )
    .await;
    assert_eq!(out.text, "1", "{out:?}");
    // An endless loop is still stopped at the cell's limit.
    let out = run(&toolbox, &mut ctx, "while True: pass").await;
    assert!(out.text.contains("timed out after 5 s"), "{}", out.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_refused_past_the_limit_are_counted_not_recorded() {
    let (toolbox, mut ctx) = chain(&["code_interpreter", "calculator"]).await;
    // A loop on a refused call, through the tool function: refused in the kernel, fast.
    let out = run(
        &toolbox,
        &mut ctx,
        "n = 0\nfor _ in range(100_000):\n    try:\n        calculator('1+1')\n    except ToolError:\n        n += 1\nn",
    )
    .await;
    assert_eq!(out.text, "99995", "{out:?}");
    let made = ctx.take_nested_calls();
    assert_eq!(
        made.len(),
        6,
        "the calls within the limit and the first refusal"
    );
    assert_eq!(made[5].observation.error_kind, Some(ToolErrorKind::Refused));
    assert_eq!(made[5].repeats, 99_994);
    // The same past the kernel's own check, on the raw channel: the host counts them.
    run(&toolbox, &mut ctx, RAW_CALL).await;
    let out = run(
        &toolbox,
        &mut ctx,
        "[raw('calculator', {'expression': '1'})['is_error'] for _ in range(300)].count(True)",
    )
    .await;
    assert_eq!(out.text, "295", "{out:?}");
    let made = ctx.take_nested_calls();
    assert_eq!(made.len(), 6);
    assert_eq!(made[5].repeats, 294);
}
