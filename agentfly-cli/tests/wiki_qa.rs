//! The wiki-qa job's shortened pipeline (`agentfly wiki-qa --smoke`), end to end on the real
//! SmolLM2 and the real corpus, both call formats: every stage of each, the reports, the
//! comparison, data disjoint by article, and a rerun that finds everything done. It checks
//! the machinery, not the gain (RESULTS.md records the full run's). It trains LoRA adapters:
//! their optimizer state is megabytes where full fine-tuning's is a gigabyte per checkpoint,
//! so the two formats' runs fit in ~3 GB of disk (CI's machines can have little).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn wiki_qa(out: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentfly"));
    cmd.args(["wiki-qa", "--smoke", "--lora", "--model"])
        .arg(agentfly_testdata::smollm2_gguf())
        .arg("--out")
        .arg(out)
        .env("AGENTFLY_WIKI_CORPUS", agentfly_testdata::wiki_corpus());
    cmd
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    agentfly_testdata::json_lines(path)
}

/// The bytes the files under `dir` take, each hard-linked file once.
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut total = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if seen.insert((meta.dev(), meta.ino())) {
                total += meta.len();
            }
        }
    }
    total
}

#[test]
fn smoke_pipeline_runs_both_formats_and_compares_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let run = wiki_qa(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");

    for format in ["hermes", "code"] {
        let dir = out.join(format);
        for stage in ["no_tools", "initial", "sft", "final"] {
            let eval = json(&dir.join(format!("evals/{stage}.json")));
            assert_eq!(eval["samples"], 6, "{format} {stage}");
        }
        let settings = json(&dir.join("settings.json"));
        assert_eq!(settings["task"]["wiki-qa"], format);
        let toml = std::fs::read_to_string(dir.join("run.toml")).unwrap();
        assert!(toml.contains("reward = \"squad_exact_match\""), "{toml}");
        assert!(toml.contains(&format!("format = \"{format}\"")), "{toml}");
        // The held-out questions' articles are never trained on.
        let articles = |split: &str| -> Vec<String> {
            lines(&dir.join(format!("data/{split}.jsonl")))
                .iter()
                .map(|s| s["article"].as_str().unwrap().to_string())
                .collect()
        };
        let test = articles("test");
        for split in ["train", "val", "demos"] {
            assert!(articles(split).iter().all(|a| !test.contains(a)), "{split}");
        }
        // The two narrow forms in turn: retrieve a named article; search a described one.
        let demos = lines(&dir.join("data/demos.jsonl"));
        for (demo, tool) in demos.iter().zip(["retrieve", "search"]) {
            let first_call = demo["messages"][1]["content"].as_str().unwrap();
            match format {
                "hermes" => assert!(
                    first_call.contains(&format!("\"name\":\"{tool}\"")),
                    "{first_call}"
                ),
                _ => assert!(
                    first_call.starts_with(&format!("```python\nprint({tool}(")),
                    "{first_call}"
                ),
            }
        }
        let report = std::fs::read_to_string(dir.join("report/REPORT.md")).unwrap();
        assert!(report.contains("Wiki agent"), "{report}");
        assert!(
            report.contains("search, retrieve, submit_answer"),
            "{report}"
        );
        // The code format runs model-written code: the report says what the sandbox held.
        assert_eq!(
            report.contains("Model-written code ran in the Python sandbox"),
            format == "code",
            "{report}"
        );
    }
    assert!(stderr.contains("sandbox: network isolated "), "{stderr}");
    // The closed book has no call format: the code format took Hermes's evaluation.
    assert_eq!(
        json(&out.join("code/evals/no_tools.json")),
        json(&out.join("hermes/evals/no_tools.json"))
    );
    assert!(
        stderr.contains(&format!(
            "the same evaluation as {}'s: taken from there",
            out.join("hermes").display()
        )),
        "{stderr}"
    );

    // The code format's prompt shows the tools as Python functions.
    let system = std::fs::read_to_string(out.join("code/system.txt")).unwrap();
    assert!(
        system.contains("def search(query: str, k: int | None = None) -> str:"),
        "{system}"
    );
    assert!(!system.contains("def code_interpreter"), "{system}");

    let comparison = std::fs::read_to_string(out.join("COMPARISON.md")).unwrap();
    for row in [
        "hermes: after RL",
        "code: after RL",
        "code: initial, no tools",
    ] {
        assert!(comparison.contains(row), "{row}:\n{comparison}");
    }
    assert!(
        comparison.contains("code format: RL over SFT"),
        "{comparison}"
    );
    assert!(
        comparison.contains(
            "| policy | year_titled | year_untitled | title_from_description | token F1 |"
        ),
        "{comparison}"
    );

    // One copy of each set of weights: the run fits the disk it claims to.
    let bytes = disk_bytes(&out);
    assert!(bytes < 3 << 30, "{bytes} bytes on disk");

    // A rerun finds every stage done.
    let again = wiki_qa(&out).output().unwrap();
    assert!(again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!stderr.contains("SFT warm start"), "{stderr}");
}
