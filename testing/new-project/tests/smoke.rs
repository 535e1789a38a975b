//! The project `agentfly new` makes, as its user first runs it: `cargo run -- task.toml
//! --preset smoke` (here on the SmolLM2 the tests share, not a fetched copy) goes through
//! every stage — closed-book and initial evaluations, SFT on the demonstrations, RL, the
//! evaluation after — and writes the report, with this crate's tool and reward at work.

use std::process::Command;

#[test]
fn the_smoke_preset_trains_and_reports_with_the_projects_own_tool_and_reward() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let output = Command::new(env!("CARGO_BIN_EXE_agentfly-new-project"))
        .args(["task.toml", "--preset", "smoke", "--out"])
        .arg(&out)
        .arg("--set")
        .arg(format!(
            "model.path={}",
            agentfly_testdata::smollm2_gguf().display()
        ))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for stage in ["no_tools", "initial", "sft", "final"] {
        assert!(
            out.join(format!("evals/{stage}.json")).is_file(),
            "{stage}: {stderr}"
        );
    }
    let report = std::fs::read_to_string(out.join("report/REPORT.md")).unwrap();
    assert!(
        report.contains("learns to count letters with a tool")
            && report.contains("tools: count_letter, submit_answer")
            && report.contains("Without tools the initial model solves"),
        "{report}"
    );
    // The project's reward scored every chain (its `correct` metric is the accuracy).
    let initial: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("evals/initial.json")).unwrap())
            .unwrap();
    let trajectories = initial["trajectories"].as_array().unwrap();
    assert_eq!(trajectories.len(), 4);
    assert!(
        trajectories
            .iter()
            .all(|t| t["reward_metrics"]["correct"].is_number()),
        "{initial}"
    );
    assert!(out.join("out/tensorboard").is_dir());
}
