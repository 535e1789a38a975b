//! A corpus of malformed input — datasets, configurations, model files, tool calls and task
//! options — run through the `agentfly` binary as a user would. Every case must end with a
//! non-zero exit and a one-line reason that names what is wrong; none may panic or abort,
//! and every file a case brings is still there, unchanged, afterwards.

use agentfly_testdata::{fixture, gguf_header};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One malformed input: the files it needs, the command, and what its reason must say.
struct Case {
    name: &'static str,
    files: Vec<(&'static str, Vec<u8>)>,
    args: Vec<String>,
    says: &'static [&'static str],
}

/// A training configuration over `data` with `edit` applied to the text.
fn config(data: &str, edit: impl Fn(String) -> String) -> Vec<u8> {
    let model = fixture("tiny-qwen2");
    let text = format!(
        r#"[model]
path = "{}"

[data]
train = "{data}"

[agent]
tools = ["calculator", "submit_answer"]
reward = "exact_numeric"

[chain]
temperature = 1.0

[rollout]
chains = 4

[train]
steps = 1

[output]
dir = "out"
"#,
        model.display()
    );
    edit(text).into_bytes()
}

/// The tiny Qwen2 fixture's files, `config.json` edited.
fn tiny_model(edit: impl Fn(&mut serde_json::Value)) -> Vec<(&'static str, Vec<u8>)> {
    let dir = fixture("tiny-qwen2");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    vec![
        ("model/config.json", config.to_string().into_bytes()),
        (
            "model/model.safetensors",
            std::fs::read(dir.join("model.safetensors")).unwrap(),
        ),
    ]
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const SAMPLES: &str = "{\"id\": 1, \"question\": \"What is 2 + 2?\", \"answer\": 4}\n";

fn cases() -> Vec<Case> {
    let train = |edit: fn(String) -> String| ("run.toml", config("train.jsonl", edit));
    let samples = ("train.jsonl", SAMPLES.as_bytes().to_vec());
    let generate = |model: &str| args(&["generate", "--model", model, "--prompt", "hi"]);
    let tiny = fixture("tiny-qwen2").display().to_string();
    vec![
        Case {
            name: "a dataset line that is not JSON",
            files: vec![
                (
                    "train.jsonl",
                    format!("{SAMPLES}{{\"id\": 2, \"question\": \n").into_bytes(),
                ),
                train(|t| t),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["train.jsonl:2"],
        },
        Case {
            name: "two samples with one id",
            files: vec![
                ("train.jsonl", format!("{SAMPLES}{SAMPLES}").into_bytes()),
                train(|t| t),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["train.jsonl:2", "sample id `1` appears twice"],
        },
        Case {
            name: "an empty training set",
            files: vec![("train.jsonl", Vec::new()), train(|t| t)],
            args: args(&["train", "--config", "run.toml"]),
            says: &["train.jsonl", "no samples"],
        },
        Case {
            name: "an unknown configuration key",
            files: vec![
                samples.clone(),
                train(|t| t.replace("steps = 1", "step = 1")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["run.toml", "step"],
        },
        Case {
            name: "a value of the wrong type",
            files: vec![
                samples.clone(),
                train(|t| t.replace("chains = 4", "chains = \"four\"")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["run.toml", "chains"],
        },
        Case {
            name: "a group estimator with one chain",
            files: vec![
                samples.clone(),
                train(|t| t.replace("chains = 4", "chains = 1")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["run.toml", "rollout.chains"],
        },
        Case {
            name: "truncated sampling for training",
            files: vec![
                samples.clone(),
                train(|t| t.replace("temperature = 1.0", "temperature = 1.0\ntop_p = 0.9")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["run.toml", "chain.top_p"],
        },
        Case {
            name: "an unknown tool",
            files: vec![
                samples.clone(),
                train(|t| t.replace("\"calculator\"", "\"calc\"")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["calc", "calculator"],
        },
        Case {
            name: "a model path that does not exist",
            files: vec![],
            args: generate("no-such-model"),
            says: &["no-such-model"],
        },
        Case {
            name: "a file that is not a GGUF",
            files: vec![("model.gguf", b"hello, not a model".to_vec())],
            args: generate("model.gguf"),
            says: &["model.gguf", "not a GGUF file"],
        },
        Case {
            name: "a GGUF with a corrupt tensor count",
            files: vec![("model.gguf", gguf_header(1 << 40, &[4]))],
            args: generate("model.gguf"),
            says: &["model.gguf", "tensor count"],
        },
        Case {
            name: "a GGUF with a corrupt dimension",
            files: vec![("model.gguf", gguf_header(1, &[1 << 40, 1 << 40]))],
            args: generate("model.gguf"),
            says: &["model.gguf", "tensor `x` has dimensions"],
        },
        Case {
            name: "a GGUF cut short",
            files: vec![("model.gguf", gguf_header(1, &[256]))],
            args: generate("model.gguf"),
            says: &["model.gguf", "runs past the end of the file"],
        },
        Case {
            name: "weights that contradict config.json",
            files: tiny_model(|c| c["hidden_size"] = 96.into()),
            args: generate("model"),
            says: &["model", "shape"],
        },
        Case {
            name: "a config.json that is not JSON",
            files: vec![("model/config.json", b"{\"hidden_size\": ".to_vec())],
            args: generate("model"),
            says: &["config.json"],
        },
        Case {
            name: "a chat rollout on a model without a tokenizer",
            files: vec![samples.clone()],
            args: vec![
                "rollout".into(),
                "--model".into(),
                fixture("tiny-qwen2").display().to_string(),
                "--data".into(),
                "train.jsonl".into(),
                "--tools".into(),
                "calculator".into(),
                "--out".into(),
                "trajectories.jsonl".into(),
            ],
            says: &["tiny-qwen2", "no tokenizer"],
        },
        Case {
            name: "more warm-start demonstrations than can be made",
            files: vec![],
            args: args(&["tasks", "arithmetic", "--out", "data", "--demos", "2000000"]),
            says: &["--demos", "ask for fewer"],
        },
        Case {
            name: "tool arguments that are not JSON",
            files: vec![],
            args: args(&["call", "calculator", "{\"expression\": "]),
            says: &["calculator", "JSON"],
        },
        Case {
            name: "a tool argument of the wrong type",
            files: vec![],
            args: args(&["call", "calculator", "{\"expression\": 12}"]),
            says: &["calculator", "expression"],
        },
        Case {
            name: "an unknown tool called",
            files: vec![],
            args: args(&["call", "calc", "{}"]),
            says: &["calc", "calculator"],
        },
        // Tools that cannot work at all stop the run at its start, with the reason; the
        // tools' files resolve against the configuration, not the working directory.
        Case {
            name: "an evaluation with search and no encyclopedia named",
            files: vec![
                samples.clone(),
                train(|t| {
                    t.replace(
                        "\"calculator\", \"submit_answer\"",
                        "\"search\", \"retrieve\"",
                    )
                }),
            ],
            args: args(&["eval", "--config", "run.toml", "--data", "train.jsonl"]),
            says: &["search and retrieve", "resources", "wiki_corpus"],
        },
        Case {
            name: "an evaluation whose encyclopedia is missing",
            files: vec![
                samples.clone(),
                train(|t| {
                    t.replace("\"calculator\", \"submit_answer\"", "\"search\"")
                        .replace(
                            "reward =",
                            "resources = { wiki_corpus = \"corpus/wiki.json\" }\nreward =",
                        )
                }),
            ],
            args: args(&["eval", "--config", "run.toml", "--data", "train.jsonl"]),
            says: &[
                "search cannot work",
                "corpus/wiki.json is missing",
                "fetch-corpus",
            ],
        },
        Case {
            name: "training with a world's tools and no world",
            files: vec![
                samples.clone(),
                train(|t| t.replace("\"calculator\", \"submit_answer\"", "\"act\"")),
            ],
            args: args(&["train", "--config", "run.toml"]),
            says: &["act", "world", "agentfly textworld"],
        },
        Case {
            name: "a remote world where nothing listens",
            files: vec![samples.clone()],
            args: args(&[
                "rollout",
                "--model",
                tiny.as_str(),
                "--data",
                "train.jsonl",
                "--tools",
                "act",
                "--remote-url",
                "http://127.0.0.1:9",
                "--out",
                "t.jsonl",
            ]),
            says: &["the world (http://127.0.0.1:9) cannot be used"],
        },
        // --restart on a directory that is not a run of the job: refused, nothing removed
        // (the test checks every file of a case is still there afterwards).
        Case {
            name: "restart of a user's directory",
            files: vec![
                ("mine/notes.txt", b"my notes".to_vec()),
                ("mine/deep/data.csv", b"1,2,3".to_vec()),
                ("model.gguf", gguf_header(1, &[4])),
            ],
            args: args(&[
                "calculator",
                "--smoke",
                "--restart",
                "--out",
                "mine",
                "--model",
                "model.gguf",
            ]),
            says: &["mine", "not a run's", "nothing was removed"],
        },
    ]
}

fn run(dir: &Path, case: &Case) -> (Option<i32>, String, String) {
    for (name, bytes) in &case.files {
        let path: PathBuf = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .current_dir(dir)
        .env_remove("AGENTFLY_WIKI_CORPUS")
        .args(&case.args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn malformed_input_fails_with_a_one_line_reason_and_never_panics() {
    let mut failures = Vec::new();
    for case in cases() {
        let dir = tempfile::tempdir().unwrap();
        let (code, stdout, stderr) = run(dir.path(), &case);
        let reason = stderr.trim();
        let lost = case.files.iter().find(|(name, bytes)| {
            std::fs::read(dir.path().join(name)).ok().as_ref() != Some(bytes)
        });
        let problem = if let Some((name, _)) = lost {
            Some(format!("lost or changed its input file {name}"))
        } else if code.is_none() {
            Some("was killed by a signal (an abort?)".to_string())
        } else if code == Some(0) {
            Some(format!("exited 0 (stdout: {stdout})"))
        } else if stderr.contains("panicked") || code == Some(101) {
            Some("panicked".into())
        } else if reason.is_empty() || reason.lines().count() != 1 {
            Some("does not give a one-line reason".into())
        } else {
            case.says
                .iter()
                .find(|s| !reason.contains(*s))
                .map(|missing| format!("does not say `{missing}`"))
        };
        if let Some(problem) = problem {
            failures.push(format!(
                "{}: {problem}\n  agentfly {}\n  exit {code:?}\n  stderr: {stderr}",
                case.name,
                case.args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Samples the reward cannot score (no `answer`): an evaluation refuses to report an
/// accuracy, naming the sample and the reason; a rollout, which reports what happened,
/// names the reason in its summary.
#[test]
fn a_job_on_a_device_the_build_lacks_writes_nothing() {
    // Refused before the run directory is made, so the corrected command is not refused as
    // a rerun with other settings.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.gguf"), gguf_header(1, &[4])).unwrap();
    let case = Case {
        name: "a job on a device the build lacks",
        files: Vec::new(),
        args: args(&[
            "calculator",
            "--smoke",
            "--device",
            "tpu",
            "--out",
            "run",
            "--model",
            "model.gguf",
        ]),
        says: &[],
    };
    let (code, _, stderr) = run(dir.path(), &case);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--device tpu"), "{stderr}");
    assert!(!dir.path().join("run").exists(), "{stderr}");
}

#[test]
fn samples_the_reward_cannot_score_are_named_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = agentfly_testdata::smollm2_gguf();
    std::fs::write(
        dir.path().join("bare.jsonl"),
        "{\"id\": \"q1\", \"question\": \"What is 2 + 2?\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("run.toml"),
        format!(
            "[model]\npath = \"{}\"\n[data]\ntrain = \"bare.jsonl\"\n[agent]\n\
             tools = [\"calculator\"]\nreward = \"exact_numeric\"\n[chain]\nmax_turns = 1\n\
             max_tokens_per_turn = 8\n[output]\ndir = \"out\"\n",
            model.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentfly"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["eval", "--config", "run.toml", "--data", "bare.jsonl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reason = stderr.trim().lines().last().unwrap_or("");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        reason.contains("1 of 1 chains failed")
            && reason.contains("sample q1")
            && reason.contains("no field `answer`"),
        "{stderr}"
    );
    let model = model.display().to_string();
    let out = run(&[
        "rollout",
        "--model",
        &model,
        "--data",
        "bare.jsonl",
        "--tools",
        "calculator",
        "--reward",
        "exact_numeric",
        "--max-turns",
        "1",
        "--max-tokens-per-turn",
        "8",
        "--out",
        "t.jsonl",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("first reward error: sample q1:") && stdout.contains("no field `answer`"),
        "{stdout}"
    );
}

/// A remote world that wants a token the client does not have: the rollout stops at start
/// with the server's refusal and how to give the token, before any chain runs (the other
/// malformed requests a world server gets — bodies over the cap, lying lengths, slow
/// clients, guessed ids — are in agentfly-envs' remote_http tests).
#[test]
fn a_remote_world_that_refuses_the_client_stops_the_rollout_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("samples.jsonl"), SAMPLES).unwrap();
    let envs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentfly-envs");
    let mut world = Command::new("python3")
        .arg(envs.join("tests/worlds/counter.py"))
        .args(["--http", "0"])
        .env("PYTHONPATH", envs.join("python"))
        .env("AGENTFLY_REMOTE_TOKEN", "a-secret")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(world.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.split_whitespace().last().unwrap_or("").to_string();
    assert!(url.starts_with("http://"), "no URL in {line:?}");
    let model = fixture("tiny-qwen2").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .current_dir(dir.path())
        .env_remove("AGENTFLY_REMOTE_TOKEN")
        .args(["rollout", "--model", &model, "--data", "samples.jsonl"])
        .args(["--tools", "act", "--remote-url", &url, "--out", "t.jsonl"])
        .output()
        .unwrap();
    world.kill().unwrap();
    world.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let reason = stderr.trim();
    assert_eq!(reason.lines().count(), 1, "{stderr}");
    assert!(
        reason.contains(&format!("the world ({url}) cannot be used"))
            && reason.contains("HTTP 401")
            && reason.contains("AGENTFLY_REMOTE_TOKEN"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("t.jsonl").exists(),
        "no trajectories were written"
    );
}
