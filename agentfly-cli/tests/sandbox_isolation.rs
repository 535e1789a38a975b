//! Runs that execute model-written code say at their start what the sandbox enforces on
//! this machine, and training refuses to run without network isolation unless allowed.

use std::process::Command;

fn agentfly(args: &[&str], envs: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_call_of_the_code_tool_says_what_the_sandbox_enforces() {
    let (ok, stderr) = agentfly(&["call", "code_interpreter", r#"{"code": "1 + 1"}"#], &[]);
    assert!(ok, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("sandbox: network isolated "))
        .unwrap_or_else(|| panic!("no isolation line: {stderr}"));
    // As root (as CI runs) everything holds.
    if nix_root() {
        assert!(!line.contains("NO"), "{line}");
    }
    // Tools that run no code say nothing of it.
    let (ok, stderr) = agentfly(&["call", "calculator", r#"{"expression": "1+1"}"#], &[]);
    assert!(ok && !stderr.contains("sandbox:"), "{stderr}");
}

#[test]
fn training_with_code_tools_and_an_open_network_needs_allow_network() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "[model]\npath = \"model\"\n[data]\ntrain = \"missing.jsonl\"\n\
         [agent]\ntools = [\"code_interpreter\"]\nreward = \"exact_numeric\"\nformat = \"code\"\n\
         [output]\ndir = \"out\"\n",
    )
    .unwrap();
    let none = [("AGENTFLY_SANDBOX_NAMESPACES", "none")];
    let cfg = config.to_str().unwrap();
    let (ok, stderr) = agentfly(&["train", "--config", cfg], &none);
    assert!(!ok);
    assert!(
        stderr.contains("sandbox: network isolated NO")
            && stderr.contains("refusing to train with code tools")
            && stderr.contains("--allow-network"),
        "{stderr}"
    );
    assert!(!dir.path().join("out").exists(), "nothing was started");
    // Allowed: past the check (this run then stops at its missing model).
    let (ok, stderr) = agentfly(&["train", "--config", cfg, "--allow-network"], &none);
    assert!(!ok);
    assert!(
        stderr.contains("sandbox: network isolated NO") && !stderr.contains("refusing"),
        "{stderr}"
    );
}

fn nix_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}
