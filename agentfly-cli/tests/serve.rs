//! `agentfly serve` on the real SmolLM2 model, driven by the official `openai` Python
//! client (`.venv-agents`), and stopped by SIGINT.

use agentfly_testdata::{agents_python, smollm2_gguf};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn agentfly_serve_answers_the_openai_client() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(["serve", "--model"])
        .arg(smollm2_gguf())
        .args(["--port", "0", "--name", "smollm2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server ended before serving"
        );
        if let Some(at) = line.find("http://") {
            let rest = &line[at..];
            break rest[..rest.find("/v1").unwrap()].to_string();
        }
    };
    let out = Command::new(agents_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/serve/clients.py"
        ))
        .arg(&url)
        .output()
        .unwrap();
    // SIGINT stops it cleanly.
    let killed = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = server.wait().unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "agentfly serve exited with {status}");
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    let plain = out["plain"].as_str().unwrap();
    assert!(!plain.is_empty());
    assert_eq!(
        out["streamed"], out["plain"],
        "greedy: the stream spells the same reply"
    );
    assert_eq!(out["recorded"], out["plain"]);
    let logprobs = out["logprobs"].as_array().unwrap();
    assert!(!logprobs.is_empty() && logprobs.iter().all(|l| l.as_f64().unwrap() <= 0.0));
    assert_eq!(out["two_indices"], serde_json::json!([0, 1]));
    let together = out["together"].as_array().unwrap();
    assert_eq!(together.len(), 8);
    assert!(
        together.iter().all(|r| !r.as_str().unwrap().is_empty()),
        "eight clients at once, each answered"
    );
    let trajectories = out["trajectories"].as_array().unwrap();
    assert_eq!(trajectories.len(), 1);
    let t = &trajectories[0];
    let mask = t["loss_mask"].as_array().unwrap();
    let sampled = mask.iter().filter(|m| m.as_u64() == Some(1)).count();
    assert_eq!(
        sampled as u64,
        out["plain_tokens"].as_u64().unwrap(),
        "usage counts the sampled tokens"
    );
    assert_eq!(
        t["turns"][0]["text"].as_str().unwrap().trim_end(),
        plain.trim_end()
    );
}
