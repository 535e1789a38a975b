//! `agentfly render`, `logits` and `generate` against the fixtures, as a user runs them.

use serde_json::Value;
use std::process::{Command, Output};

use agentfly_testdata::{fixtures, smollm2_gguf as smollm2};

fn agentfly(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "agentfly {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory, removed when the test ends.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn render_prints_every_qwen3_fixture_exactly() {
    let tmp = scratch();
    let dir = fixtures();
    let cases: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("qwen3-template/renders.json")).unwrap(),
    )
    .unwrap();
    let template = dir.join("qwen3-template/tokenizer_config.json");
    for (i, case) in cases.iter().enumerate() {
        let conversation = tmp.path().join(format!("conv{i}.json"));
        std::fs::write(&conversation, case.to_string()).unwrap();
        let out = agentfly(&[
            "render",
            "--template",
            template.to_str().unwrap(),
            "--conversation",
            conversation.to_str().unwrap(),
        ]);
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            case["rendered"].as_str().unwrap(),
            "case {i}"
        );
        std::fs::remove_file(conversation).unwrap();
    }
}

#[test]
fn logits_writes_the_forward_pass_of_tiny_qwen2() {
    let (diff, _) = tiny_qwen2_logits_error(&[]).unwrap();
    assert!(diff < 1e-4, "max |Δlogit| = {diff}");
}

/// `--bf16` where the CPU has AMX: logits moved by bf16's rounding, and no further; where
/// it has none, a clear refusal (`AGENTFLY_REQUIRE_AMX=1` makes that a failure).
#[test]
fn logits_in_bf16_stay_within_bf16_rounding_or_are_refused_clearly() {
    let (f32_diff, _) = tiny_qwen2_logits_error(&[]).unwrap();
    match tiny_qwen2_logits_error(&["--bf16"]) {
        Ok((diff, scale)) => {
            assert!(agentfly_model::model::amx::available());
            // bf16 keeps 8 bits of mantissa: ~0.4% per input, partly averaged in the sums.
            assert!(
                diff < 1e-2 * scale && diff > 10.0 * f32_diff,
                "max |Δlogit| {diff} (f32: {f32_diff}, logits up to {scale})"
            );
        }
        Err(stderr) => {
            assert!(!agentfly_model::model::amx::available(), "{stderr}");
            assert!(
                stderr.contains("--bf16: bf16 products need Intel AMX"),
                "{stderr}"
            );
            assert!(
                std::env::var("AGENTFLY_REQUIRE_AMX").as_deref() != Ok("1"),
                "AGENTFLY_REQUIRE_AMX=1 but this CPU or OS has no AMX"
            );
            eprintln!("SKIPPED: this CPU or OS has no AMX, so --bf16 was refused (as it should)");
        }
    }
}

/// `agentfly logits` on the tiny Qwen2 fixture's two rows with `extra` options: the largest
/// difference from transformers' logits and the largest of those, or the command's stderr
/// when it fails.
fn tiny_qwen2_logits_error(extra: &[&str]) -> Result<(f32, f32), String> {
    let tmp = scratch();
    let dir = fixtures();
    let bytes = std::fs::read(dir.join("tiny-qwen2/reference.safetensors")).unwrap();
    let reference = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ids: Vec<i64> = reference
        .tensor("input_ids")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let rows: Vec<String> = ids
        .chunks(16)
        .map(|r| r.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
        .collect();
    let out_file = tmp.path().join("logits.safetensors");
    let model = dir.join("tiny-qwen2");
    let mut args = vec![
        "logits",
        "--model",
        model.to_str().unwrap(),
        "--ids",
        &rows[0],
        "--ids",
        &rows[1],
        "--out",
        out_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(&args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let written = std::fs::read(&out_file).unwrap();
    let written = safetensors::SafeTensors::deserialize(&written).unwrap();
    let logits = written.tensor("logits").unwrap();
    assert_eq!(logits.shape(), [2, 16, 512]);
    let expected = reference.tensor("logits").unwrap();
    let to_f32 = |d: &[u8]| {
        d.chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect::<Vec<_>>()
    };
    let expected = to_f32(expected.data());
    let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = to_f32(logits.data())
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    Ok((diff, scale))
}

#[test]
fn generate_json_reproduces_smollm2_greedy_fixture() {
    let tmp = scratch();
    let cases: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("smollm2/greedy.json")).unwrap(),
    )
    .unwrap();
    let case = &cases[0];
    let messages = tmp.path().join("messages.json");
    std::fs::write(
        &messages,
        serde_json::json!({"messages": case["messages"]}).to_string(),
    )
    .unwrap();
    let model = smollm2();
    let run = |extra: &[&str]| -> Value {
        let mut args = vec![
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--messages",
            messages.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_slice(&agentfly(&args).stdout).unwrap()
    };
    let full = run(&["--greedy", "--ignore-eos", "--max-new-tokens", "32"]);
    assert_eq!(full["prompt_ids"], case["prompt_ids"]);
    assert_eq!(full["new_ids"], case["new_ids"]);
    assert_eq!(full["finish_reason"], "length");
    let stopped = run(&["--max-new-tokens", "32"]);
    assert_eq!(stopped["text"], "12 times 7 is 72.");
    assert_eq!(stopped["finish_reason"], "stop");
    assert_eq!(stopped["new_ids"].as_array().unwrap().last().unwrap(), 2);
    std::fs::remove_file(messages).unwrap();
}

#[test]
fn bad_model_paths_and_devices_fail_clearly() {
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args([
            "generate",
            "--model",
            "/nonexistent/model.gguf",
            "--prompt",
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("loading /nonexistent/model.gguf") && err.contains("No such file"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args([
            "logits", "--model", "x", "--ids", "1", "--out", "/tmp/x", "--device", "tpu",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown device `tpu`; use cpu, wgpu or cuda[:N]"),
        "{err}"
    );
}

#[test]
fn rollout_writes_one_line_per_trajectory_and_a_summary() {
    let tmp = scratch();
    let shot = serde_json::json!([
        {"role": "user", "content": "What is 17 * 3?"},
        {"role": "assistant", "content": "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 3\"}}</tool_call>"},
        {"role": "tool", "name": "calculator", "content": "51"},
        {"role": "assistant", "content": "<tool_call>{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"51\"}}</tool_call>"},
        {"role": "tool", "name": "submit_answer", "content": "Answer submitted: 51"}
    ]);
    let data = tmp.path().join("rollout.jsonl");
    let mut lines = String::new();
    for (id, q, a) in [
        ("x", "What is 123 * 45?", 5535),
        ("y", "What is 56 * 78?", 4368),
    ] {
        let mut messages = shot.as_array().unwrap().clone();
        messages.push(serde_json::json!({"role": "user", "content": q}));
        lines.push_str(
            &serde_json::json!({"id": id, "messages": messages, "answer": a}).to_string(),
        );
        lines.push('\n');
    }
    std::fs::write(&data, lines).unwrap();
    let out = tmp.path().join("traj.jsonl");
    let model = smollm2();
    let run = agentfly(&[
        "rollout",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--tools",
        "calculator,submit_answer",
        "--reward",
        "exact_numeric",
        "--chains",
        "2",
        "--max-turns",
        "2",
        "--max-tokens-per-turn",
        "32",
        "--temperature",
        "0.7",
        "--seed",
        "1",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["trajectories"], 4);
    assert_eq!(summary["samples"], 2);
    assert!(summary["engine"]["requests"].as_u64().unwrap() >= 4);
    let text = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    let mut rewards = 0.0;
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row["sample_id"], ["x", "x", "y", "y"][k]);
        assert_eq!(row["chain"], k % 2);
        let n = row["tokens"].as_array().unwrap().len();
        assert_eq!(row["loss_mask"].as_array().unwrap().len(), n);
        assert_eq!(row["logprobs"].as_array().unwrap().len(), n);
        assert!(!row["turns"].as_array().unwrap().is_empty());
        assert!(row["finish_reason"].is_string());
        rewards += row["reward"].as_f64().unwrap();
    }
    let mean = summary["reward_mean"].as_f64().unwrap();
    assert!((mean - rewards / 4.0).abs() < 1e-6);

    // Mistakes are named.
    let fails = |tools: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
            .args(["rollout", "--model", model.to_str().unwrap()])
            .args(["--data", data.to_str().unwrap(), "--tools", tools])
            .args(["--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(fails("calculator,nope").contains("nope"));
    std::fs::write(&data, "{\"id\": 1}\nnot json\n").unwrap();
    let err = fails("calculator");
    assert!(err.contains("rollout.jsonl:2: not valid JSON"), "{err}");
}

#[test]
fn train_then_eval_a_checkpoint() {
    let tmp = scratch();
    let dir = tmp.path().join("train");
    std::fs::create_dir_all(&dir).unwrap();
    // Answers no response can match: every group's rewards are equal, dynamic sampling
    // drops them all, and the step has nothing to learn — the machinery runs, fast.
    let data = dir.join("data.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"question\": \"What is 2 + 2?\", \"answer\": \"never\"}\n{\"id\": \"b\", \"question\": \"What is 3 * 3?\", \"answer\": \"never\"}\n",
    )
    .unwrap();
    let config = dir.join("run.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[model]
path = "{}"

[data]
train = "data.jsonl"
eval = "data.jsonl"

[agent]
tools = ["calculator", "submit_answer"]
reward = "exact_numeric"

[chain]
max_turns = 1
max_tokens_per_turn = 8

[rollout]
chains = 2
samples_per_step = 1
max_rounds = 1

[train]
steps = 1

[output]
dir = "out"
"#,
            smollm2().display()
        ),
    )
    .unwrap();
    let out = agentfly(&["train", "--config", config.to_str().unwrap(), "--json"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["steps"], 1);
    let run = dir.join("out");
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let m: Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert_eq!(
        (m["step"].as_u64(), m["trajectories"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        m["skipped"].as_str().unwrap().contains("nothing to learn"),
        "{m}"
    );
    let checkpoint = run.join("checkpoints/step-000001");
    assert!(checkpoint.join("model/model.safetensors").exists());
    assert!(run.join("model/config.json").exists());

    // Running again: already done, resumes at step 1 and stops.
    let again = agentfly(&["train", "--config", config.to_str().unwrap(), "--json"]);
    let summary: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (summary["steps"].as_u64(), summary["resumed_from"].as_u64()),
        (Some(1), Some(1))
    );

    let trajectories = dir.join("eval.jsonl");
    let eval = agentfly(&[
        "eval",
        "--config",
        config.to_str().unwrap(),
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--out",
        trajectories.to_str().unwrap(),
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert_eq!(
        (report["samples"].as_u64(), report["correct"].as_u64()),
        (Some(2), Some(0))
    );
    let interval = report["interval"].as_array().unwrap();
    assert_eq!(interval[0].as_f64(), Some(0.0));
    assert!(
        interval[1].as_f64().unwrap() > 0.5,
        "two samples say little: {report}"
    );
    assert_eq!(
        std::fs::read_to_string(&trajectories)
            .unwrap()
            .lines()
            .count(),
        2
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn export_gguf_writes_a_model_that_computes_the_same_logits() {
    let tmp = scratch();
    let source = fixtures().join("tiny-qwen2-gguf/model.gguf");
    let exported = tmp.path().join("exported.gguf");
    let source_arg = source.to_str().unwrap();
    agentfly(&[
        "export-gguf",
        "--model",
        source_arg,
        "--template",
        source_arg,
        "--dtype",
        "f32",
        "--out",
        exported.to_str().unwrap(),
    ]);
    let logits = |model: &str| {
        let out = tmp.path().join("logits.safetensors");
        agentfly(&[
            "logits",
            "--model",
            model,
            "--ids",
            "1,5,9,42,7",
            "--out",
            out.to_str().unwrap(),
        ]);
        std::fs::read(out).unwrap()
    };
    let (before, after) = (logits(source_arg), logits(exported.to_str().unwrap()));
    assert_eq!(before, after, "the exported model's logits differ");
}
