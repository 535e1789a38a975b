//! The second world's example (`examples/runs/scienceworld`): ScienceWorld's
//! `find-non-living-thing` as a task file. Its checked-in data is what its `make_data.py`
//! writes (remade here for the smoke splits, from the real ScienceWorld), with the held-out
//! splits disjoint from the rest; its smoke preset runs through every stage of `agentfly run`
//! on the real SmolLM2 against real ScienceWorld servers.

use agentfly_core::Sample;
use agentfly_core::data::read_jsonl;
use agentfly_jobs::job::TaskSpec;
use agentfly_tools::tasks::arithmetic::check_disjoint;
use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    agentfly_testdata::repo().join("examples/runs/scienceworld")
}

fn samples(path: &Path) -> Vec<Sample> {
    read_jsonl(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_data_is_what_make_data_writes_and_the_held_out_games_are_nobody_elses() {
    for (preset, sizes) in [(None, [40, 10, 40, 40]), (Some("smoke"), [4, 2, 3, 4])] {
        let spec = TaskSpec::load(&example().join("task.toml"), preset, &[]).unwrap();
        let d = &spec.data;
        let splits = [
            ("train", samples(&d.train)),
            ("val", samples(d.val.as_ref().unwrap())),
            ("test", samples(&d.test)),
            ("demos", samples(d.demos.as_ref().unwrap())),
        ];
        let counts: Vec<usize> = splits.iter().map(|(_, s)| s.len()).collect();
        assert_eq!(counts, sizes, "{preset:?}");
        for held_out in ["val", "test"] {
            let h = &splits.iter().find(|(n, _)| *n == held_out).unwrap().1;
            for (name, other) in splits.iter().filter(|(n, _)| *n != held_out) {
                check_disjoint(&[(held_out, h), (name, other)])
                    .unwrap_or_else(|o| panic!("{preset:?}: {o:?}"));
            }
        }
        // Every demonstration is a whole game: acts only, its last act ends it.
        for demo in &splits[3].1 {
            let messages = demo.fields["messages"].as_array().unwrap();
            let last = messages.last().unwrap();
            assert_eq!(last["role"], "assistant", "{}", demo.id);
            assert!(
                last["content"].as_str().unwrap().contains("move "),
                "{}",
                demo.id
            );
        }
    }
    // The smoke splits remade from the real ScienceWorld: byte for byte the checked-in ones.
    let out = tempfile::tempdir().unwrap();
    let made = Command::new(agentfly_testdata::worlds_python())
        .arg(example().join("make_data.py"))
        .arg(out.path())
        .args(["--train", "4", "--val", "2", "--test", "3", "--demos", "4"])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    for split in ["train", "val", "test", "demos"] {
        let file = format!("{split}.jsonl");
        assert_eq!(
            std::fs::read_to_string(out.path().join(&file)).unwrap(),
            std::fs::read_to_string(example().join("data/smoke").join(&file)).unwrap(),
            "{file}"
        );
    }
}

#[test]
fn the_smoke_preset_plays_real_scienceworld_games_through_every_stage() {
    let out = tempfile::tempdir().unwrap();
    let run = out.path().join("run");
    let python = agentfly_testdata::worlds_python();
    let output = Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .arg("run")
        .arg(example().join("task.toml"))
        .args(["--preset", "smoke", "--out"])
        .arg(&run)
        .arg("--set")
        .arg(format!(
            "model.path={:?}",
            agentfly_testdata::smollm2_gguf().display().to_string()
        ))
        .arg("--set")
        .arg(format!(
            "world.command=[{:?}, \"{{worlds}}/serve_scienceworld.py\"]",
            python.display().to_string()
        ))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = std::fs::read_to_string(run.join("report/REPORT.md")).unwrap();
    for row in ["| initial |", "| after SFT |", "| after RL |"] {
        assert!(report.contains(row), "{row} missing from\n{report}");
    }
    for stage in ["initial", "sft", "final"] {
        let eval: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(run.join(format!("evals/{stage}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(eval["failed"], 0, "{stage}: {}", eval["first_failure"]);
        let trajectories = eval["trajectories"].as_array().unwrap();
        assert_eq!(trajectories.len(), 3, "{stage}");
        // The reward read ScienceWorld's own score: the games were really served.
        for t in trajectories {
            assert!(t["reward_metrics"]["score"].is_number(), "{stage}: {t}");
        }
    }
    // The policy after SFT acts through the tool (the demonstrations' format).
    let sft: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("evals/sft.json")).unwrap())
            .unwrap();
    assert!(sft["tool_call_rate"].as_f64().unwrap() > 0.0, "{sft}");
}
