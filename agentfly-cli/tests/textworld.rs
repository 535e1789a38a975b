//! The text-world job's shortened pipeline (`agentfly textworld --smoke`), end to end on the
//! real SmolLM2 and real TextWorldExpress games served through the remote bridge: every
//! stage, the data held out by fold and by first observation, demonstrations that replay
//! the games' gold paths, the report, and a rerun that finds everything done. It checks the
//! machinery, not the gain (RESULTS.md records the full run's).

use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

fn textworld(out: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentfly"));
    cmd.args(["textworld", "--smoke", "--lora", "--model"])
        .arg(agentfly_testdata::smollm2_gguf())
        .arg("--out")
        .arg(out)
        .env("AGENTFLY_WORLDS_PYTHON", agentfly_testdata::worlds_python());
    cmd
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn smoke_pipeline_plays_held_out_games() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let run = textworld(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");

    for stage in ["initial", "sft", "final"] {
        let eval = json(&out.join(format!("evals/{stage}.json")));
        assert_eq!(eval["samples"], 3, "{stage}");
        // Every game was played in the world: the chain leased a server and the reward
        // read its episode.
        for t in eval["trajectories"].as_array().unwrap() {
            assert!(t["reward"].is_number(), "{stage}: {t}");
            assert!(t["reward_metrics"]["steps"].is_number(), "{stage}: {t}");
        }
    }
    // A game is played only by acting: no closed-book stage.
    assert!(!out.join("evals/no_tools.json").exists());
    assert_eq!(json(&out.join("settings.json"))["task"], "textworld");
    let toml = std::fs::read_to_string(out.join("run.toml")).unwrap();
    assert!(toml.contains("reward = \"world_success\""), "{toml}");
    assert!(toml.contains("tools = [\"act\"]"), "{toml}");

    // Each split from its own fold; no first observation in two splits.
    let split = |name: &str| agentfly_testdata::json_lines(&out.join(format!("data/{name}.jsonl")));
    let mut seen = HashSet::new();
    for (name, fold) in [("test", "test"), ("val", "dev"), ("train", "train")] {
        for sample in split(name) {
            assert_eq!(sample["fold"], fold, "{name}: {sample}");
            let question = sample["question"].as_str().unwrap().to_string();
            assert!(question.starts_with("Your task is"), "{question}");
            // The game lists what it accepts, as the first action's choices.
            assert!(question.contains("\nValid actions: "), "{question}");
            assert!(seen.insert(question), "{name}: a game seen twice");
        }
    }
    // Demonstrations: the gold path through the act tool, ending with the call that
    // completed the task (the chain ends there, so no observation follows it).
    for demo in split("demos") {
        let messages = demo["messages"].as_array().unwrap();
        let question = messages[0]["content"].as_str().unwrap().to_string();
        assert!(
            seen.insert(question),
            "a demonstration game is also a split's"
        );
        let calls = messages.iter().filter(|m| m["role"] == "assistant").count();
        assert!(calls >= 3, "{demo}");
        // The gold path's opening `look around` would repeat the question: it is left out.
        let opening = messages[1]["content"].as_str().unwrap();
        assert!(!opening.contains("look around"), "{opening}");
        let last = messages.last().unwrap()["content"].as_str().unwrap();
        assert!(last.contains("\"name\":\"act\""), "{last}");
        assert!(
            messages
                .iter()
                .any(|m| m["role"] == "tool"
                    && m["content"].as_str().unwrap().starts_with("You take")),
            "{demo}"
        );
    }

    let report = std::fs::read_to_string(out.join("report/REPORT.md")).unwrap();
    assert!(report.contains("Text-world agent"), "{report}");
    assert!(report.contains("The game's own score"), "{report}");

    // A rerun finds every stage done.
    let again = textworld(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(!stderr.contains("SFT warm start"), "{stderr}");
    assert!(!stderr.contains("4/5 RL"), "{stderr}");
}
