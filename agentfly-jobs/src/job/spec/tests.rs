//! Task files: the built-in jobs' own reproduce their trainer configurations exactly (so a
//! job run through its spec learns as it did); presets and overrides; mistakes named by file,
//! line and key.

use super::*;
use crate::job::settings::tests::settings_args;
use crate::job::{CallFormat, Settings, Task};

/// A small task file's text, with `extra` appended.
fn minimal(extra: &str) -> String {
    format!(
        "[task]\nname = \"sums\"\n\n[data]\ntrain = \"data/train.jsonl\"\ntest = \"data/test.jsonl\"\n\n\
         [model]\npath = \"m.gguf\"\n\n[agent]\ntools = [\"calculator\", \"submit_answer\"]\n\
         reward = \"exact_numeric\"\nsystem_prompt = \"Use the calculator.\"\n{extra}"
    )
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("task.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_built_in_jobs_task_file_gives_its_trainer_configuration_also_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("run/data");
    for task in [
        Task::Calculator,
        Task::WikiQa(CallFormat::Hermes),
        Task::WikiQa(CallFormat::Code),
        Task::TextWorld,
    ] {
        for argv in [
            &[][..],
            &["--full"],
            &["--smoke"],
            &["--lora"],
            &["--algorithm", "ppo", "--kl-coef", "0.05"],
            &["--algorithm", "rloo", "--format-bonus", "0.1", "--overlap"],
            &["--llama-server", "--bf16"],
            &["--mcp", "uvx mcp-server-git --repository '/data/a repo'"],
        ] {
            let args = settings_args(argv);
            let model = PathBuf::from("/m.gguf");
            let settings = match task {
                Task::Calculator => Settings::from_args(&args, model.clone()),
                Task::WikiQa(format) => Settings::wiki_qa(&args, model.clone(), format),
                Task::TextWorld => Settings::textworld(&args, model.clone()),
            };
            let expected = settings.trainer_config(&model, Path::new(""), true);
            // The world's server as the job configures it, with a stand-in for the python
            // of .venv-worlds (which unit tests do not have).
            let world = || {
                Ok(RemoteConfig {
                    cwd: Some("/srv".into()),
                    ..crate::textworld::games::world_with("/venv/bin/python".into())
                })
            };
            let spec = settings.task_spec_with(&data, world).unwrap();
            assert_eq!(
                spec.trainer_config(Path::new("")),
                expected,
                "{task:?} {argv:?}"
            );
            assert_eq!(spec.system_prompt().unwrap(), task.tool_prompt());

            // The file the job writes, read back as `agentfly run` reads it.
            let path = write(dir.path(), &spec.to_toml("# header\n").unwrap());
            let back = TaskSpec::load(&path, None, &[]).unwrap();
            assert_eq!(back, spec, "{task:?} {argv:?}");
            assert_eq!(back.trainer_config(Path::new("")), expected);
        }
    }
}

#[test]
fn relative_paths_are_the_files_and_defaults_fill_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TaskSpec::load(&write(dir.path(), &minimal("")), None, &[]).unwrap();
    assert_eq!(spec.model.path, dir.path().join("m.gguf"));
    assert_eq!(spec.data.train, dir.path().join("data/train.jsonl"));
    assert_eq!(
        (spec.data.val.as_ref(), spec.data.demos.as_ref()),
        (None, None)
    );
    assert_eq!(spec.task.items, "questions");
    assert_eq!(spec.task.preset, "default");
    assert_eq!(spec.algorithm_name(), "grpo");
    // No demonstrations, no SFT; the run's own copies of the data.
    let config = spec.trainer_config(Path::new(""));
    assert_eq!(config.sft, None);
    assert_eq!(config.data.train, Path::new("data/train.jsonl"));
    assert_eq!(
        config.agent.system_prompt_file.as_deref(),
        Some(Path::new("system.txt"))
    );
}

#[test]
fn a_preset_then_the_overrides_apply_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = minimal(
        "[train]\nsteps = 20\n\n[presets.smoke]\ntrain.steps = 2\nrollout.chains = 2\n\
         data.demos = \"data/few-demos.jsonl\"\n",
    );
    let path = write(dir.path(), &text);
    let plain = TaskSpec::load(&path, None, &[]).unwrap();
    assert_eq!((plain.train.steps, plain.rollout.chains), (20, 4));
    assert!(
        plain.presets.is_empty(),
        "what a run records is its effective values"
    );

    let sets = ["rollout.chains=3".to_string(), "optim.lr=1e-6".to_string()];
    let smoke = TaskSpec::load(&path, Some("smoke"), &sets).unwrap();
    assert_eq!(smoke.task.preset, "smoke");
    assert_eq!((smoke.train.steps, smoke.rollout.chains), (2, 3));
    assert_eq!(smoke.optim.lr, 1e-6);
    assert_eq!(
        smoke.data.demos,
        Some(dir.path().join("data/few-demos.jsonl"))
    );
    assert!(smoke.trainer_config(Path::new("")).sft.is_some());

    let e = TaskSpec::load(&path, Some("full"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no [presets.full] (it has: smoke)"), "{e}");
}

#[test]
fn mistakes_name_the_file_the_line_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &minimal("[rollout]\nchians = 8\n"));
    let e = TaskSpec::load(&path, None, &[]).unwrap_err().to_string();
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    assert!(e.contains("line 16") && e.contains("chians"), "{e}");

    let path = write(dir.path(), &minimal("[task2]\nx = 1\n"));
    let e = TaskSpec::load(&path, None, &[]).unwrap_err().to_string();
    assert!(e.contains("task2"), "{e}");

    let path = write(
        dir.path(),
        &minimal("[algorithm]\nestimator = { name = \"grpo\" }\n[rollout]\nchains = 1\n"),
    );
    let e = TaskSpec::load(&path, None, &[]).unwrap_err().to_string();
    assert!(e.contains("rollout.chains"), "{e}");

    let path = write(dir.path(), &minimal(""));
    let e = TaskSpec::load(&path, None, &["task.eval_every=0".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("task.eval_every"), "{e}");
    let e = TaskSpec::load(&path, None, &["rollout.chians=8".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--set rollout.chians=8") && e.contains("chians"),
        "{e}"
    );

    let no_prompt = minimal("").replace("system_prompt = \"Use the calculator.\"\n", "");
    let e = TaskSpec::load(&write(dir.path(), &no_prompt), None, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("agent.system_prompt"), "{e}");
}
