//! `agentfly config show` and `--set KEY=VALUE`: the effective configuration with every
//! default, overrides applied as if written in the file, and mistakes that name the file and
//! the key.

use std::path::Path;
use std::process::{Command, Output};

const REQUIRED: &str = "[model]\npath = \"model.gguf\"\n[data]\ntrain = \"train.jsonl\"\n\
                        [agent]\ntools = [\"calculator\"]\nreward = \"exact_numeric\"\n\
                        [output]\ndir = \"out\"\n[rollout]\nchains = 4\n";

fn agentfly(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("the agentfly binary runs")
}

fn show(config: &Path, sets: &[&str]) -> (toml::Table, String) {
    let mut args = vec!["config", "show"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = agentfly(&args, config);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        toml::from_str(&text).expect("config show prints TOML"),
        text,
    )
}

#[test]
fn config_show_prints_every_default_and_the_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.toml");
    std::fs::write(&path, REQUIRED).unwrap();
    let (shown, text) = show(
        &path,
        &[
            "rollout.chains=8",
            "agent.format=code",
            "optim.lr=2e-6",
            "output.dir=elsewhere",
        ],
    );
    assert_eq!(shown["rollout"]["chains"].as_integer(), Some(8));
    assert_eq!(shown["agent"]["format"].as_str(), Some("code"));
    assert_eq!(shown["optim"]["lr"].as_float(), Some(2e-6));
    // Defaults written out, paths resolved beside the file (an override's too).
    assert_eq!(shown["output"]["tensorboard"].as_bool(), Some(true));
    assert!(
        shown["algorithm"].as_table().is_some_and(|t| !t.is_empty()),
        "{text}"
    );
    assert_eq!(
        Path::new(shown["output"]["dir"].as_str().unwrap()),
        dir.path().join("elsewhere")
    );
    // What it prints is itself a configuration that shows the same.
    let again = dir.path().join("shown.toml");
    std::fs::write(&again, &text).unwrap();
    assert_eq!(show(&again, &[]).1, text);
}

#[test]
fn a_bad_override_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.toml");
    std::fs::write(&path, REQUIRED).unwrap();
    for (set, says) in [
        ("rollout.chians=8", "chians"),
        ("rollout.chains=many", "--set rollout.chains=many"),
        ("rollout.chains", "KEY=VALUE"),
        ("rollout.chains.x=1", "`rollout.chains` is not a table"),
    ] {
        for command in [&["config", "show"][..], &["train"][..]] {
            let mut args = command.to_vec();
            args.extend(["--set", set]);
            let out = agentfly(&args, &path);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{set}: {err}");
            assert!(err.contains(says), "{set}: {err}");
            assert!(err.contains("run.toml"), "{set}: {err}");
        }
    }
}
