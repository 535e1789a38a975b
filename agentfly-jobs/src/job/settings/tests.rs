//! The presets' and options' settings, and the trainer configurations they imply.

use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: RunArgs,
}

pub(crate) fn settings_args(argv: &[&str]) -> RunArgs {
    Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
        .unwrap()
        .args
}

fn settings(argv: &[&str]) -> Settings {
    Settings::from_args(&settings_args(argv), "/m.gguf".into())
}

#[test]
fn every_algorithm_and_preset_gives_a_trainer_config_that_loads_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    for algorithm in ["grpo", "rloo", "reinforce++", "ppo"] {
        for preset in [
            &[][..],
            &["--full"],
            &["--smoke"],
            &["--lora"],
            &["--overlap"],
            &["--bf16"],
            &["--llama-server"],
            &["--kl-coef", "0.05"],
            &["--mcp", "uvx mcp-server-git --repository '/data/a repo'"],
        ] {
            let mut argv = vec!["--algorithm", algorithm, "--format-bonus", "0.1"];
            argv.extend_from_slice(preset);
            let s = settings(&argv);
            let path = dir.path().join("run.toml");
            std::fs::write(
                &path,
                s.trainer_toml(Path::new("/m.gguf"), Path::new(""), true),
            )
            .unwrap();
            let loaded = TrainerConfig::load(&path).unwrap();
            let mut expected = s.trainer_config(Path::new("/m.gguf"), Path::new(""), true);
            expected.resolve(dir.path());
            assert_eq!(loaded, expected, "{algorithm} {preset:?}");
            assert_eq!(loaded.sft.as_ref().unwrap().epochs, s.sft_epochs);
            assert_eq!(loaded.train.steps, s.steps);
            assert_eq!(loaded.rollout.chains, s.chains);
            assert_eq!(loaded.agent.format_bonus, 0.1);
            assert_eq!(loaded.data.train, dir.path().join("data/train.jsonl"));
            assert_eq!(
                loaded.agent.system_prompt_file.as_deref(),
                Some(dir.path().join("system.txt").as_path())
            );
            assert!(
                loaded.algorithm.estimator.needs_values() == (algorithm == "ppo"),
                "{algorithm}"
            );
            let steps_per_batch = loaded.train.ppo_epochs * loaded.train.mini_batches;
            assert_eq!(steps_per_batch > 1, algorithm == "ppo", "{algorithm}");
        }
    }
    // The wiki-qa presets: their tools, reward and format reach the trainer.
    for (format, tools) in [
        (CallFormat::Hermes, "search,retrieve,submit_answer"),
        (
            CallFormat::Code,
            "code_interpreter,search,retrieve,submit_answer",
        ),
    ] {
        for preset in [&[][..], &["--smoke"], &["--full"]] {
            let cli =
                Cli::try_parse_from(std::iter::once("x").chain(preset.iter().copied())).unwrap();
            let s = Settings::wiki_qa(&cli.args, "/m.gguf".into(), format);
            let c = s.trainer_config(Path::new("/m.gguf"), Path::new(""), true);
            assert_eq!(c.agent.tools.join(","), tools);
            assert_eq!(c.agent.reward, "squad_exact_match");
            assert_eq!(c.agent.format, format.name());
            assert!(s.test >= 6 && s.demos >= 8, "{s:?}");
            if preset == ["--smoke"] {
                // The smoke run checks the machinery: the calculator's small RL steps.
                assert_eq!((s.samples_per_step, s.chains), (2, 4), "{s:?}");
                assert_eq!(c.output.keep_checkpoints, 1);
                assert_eq!(s.eval_every, 1, "{s:?}");
            } else {
                assert_eq!(c.output.keep_checkpoints, 2);
                // 300 held-out questions; validation after the tenth step only.
                assert_eq!((s.test, s.eval_every), (300, 10), "{s:?}");
            }
            let back: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s);
        }
    }
    // A calculator run's settings.json stays as it was (no task field).
    let json = serde_json::to_value(settings(&[])).unwrap();
    assert!(json.get("task").is_none(), "{json}");
    // An ablation's configuration, two directories below the run: no [sft], the
    // run's data.
    let s = settings(&[]);
    let c = s.trainer_config(Path::new("/sft"), Path::new("../.."), false);
    assert!(c.sft.is_none());
    assert_eq!(c.data.train, Path::new("../../data/train.jsonl"));
    assert!(!settings(&["--no-mask"]).mask);
    // Another reward reaches the trainer, and only then settings.json.
    let cli = Cli::try_parse_from(["x", "--reward", "world_score"]).unwrap();
    let s = Settings::textworld(&cli.args, "/m.gguf".into());
    let c = s.trainer_config(Path::new("/m.gguf"), Path::new(""), true);
    assert_eq!(c.agent.reward, "world_score");
    assert_eq!(
        Settings::default_dir_of(Task::TextWorld, &cli.args),
        Path::new("target/runs/textworld-world_score")
    );
    let json = serde_json::to_value(Settings::textworld(&settings_args(&[]), "/m".into()));
    assert!(json.unwrap().get("reward").is_none());
    // The text world's default: 5 steps of one round each; the other presets and
    // `--steps` keep theirs.
    let world = |argv: &[&str]| {
        let s = Settings::textworld(&settings_args(argv), "/m".into());
        (s.steps, s.max_rounds)
    };
    assert_eq!(world(&[]), (5, 1));
    assert_eq!(world(&["--steps", "8"]), (8, 1));
    assert_eq!(world(&["--full"]), (40, 3));
    assert_eq!(world(&["--smoke"]), (2, 2));
    assert_eq!(settings(&["--smoke", "--steps", "5"]).steps, 5);
    // `--lr` replaces RL's learning rate, LoRA's tenfold one too, in every job.
    for argv in [&["--lr", "4e-5"][..], &["--lora", "--lr", "4e-5"]] {
        let s = settings(argv);
        let c = s.trainer_config(Path::new("/m.gguf"), Path::new(""), true);
        assert_eq!((s.lr, c.optim.lr), (4e-5, 4e-5), "{argv:?}");
    }
    let args = settings_args(&["--lr", "4e-5"]);
    assert_eq!(
        Settings::wiki_qa(&args, "/m".into(), CallFormat::Code).lr,
        4e-5
    );
    assert_eq!(Settings::textworld(&args, "/m".into()).lr, 4e-5);
    assert_eq!(settings(&[]).lr, 2e-5);
    // `--kl-coef` reaches the loss (with the reference model the trainer then loads);
    // at 0 settings.json stays as it was.
    let c = settings(&["--kl-coef", "0.05"]).trainer_config(Path::new("/m"), Path::new(""), true);
    assert_eq!(c.train.loss.kl_coef, 0.05);
    let json = serde_json::to_value(settings(&[])).unwrap();
    assert!(json.get("kl_coef").is_none(), "{json}");
    for bad in ["-0.1", "inf", "NaN", "much"] {
        let parsed = Cli::try_parse_from(["x".to_string(), format!("--kl-coef={bad}")]);
        let err = parsed.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("is not a number of 0 or more"), "{bad}: {err}");
    }
    for bad in ["0", "-1e-5", "inf", "NaN", "fast"] {
        let parsed = Cli::try_parse_from(["x".to_string(), format!("--lr={bad}")]);
        let err = parsed.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("is not a positive number"), "{bad}: {err}");
    }
}

#[test]
fn mcp_servers_of_the_command_line_reach_the_trainer_and_the_settings_file() {
    let s = settings(&[
        "--smoke",
        "--mcp",
        "uvx mcp-server-git --repository '/data/a repo'",
        "--mcp",
        "npx -y @modelcontextprotocol/server-memory",
    ]);
    let c = s.trainer_config(Path::new("/m.gguf"), Path::new(""), true);
    let servers: Vec<_> = c
        .agent
        .mcp
        .iter()
        .map(|m| (m.name.as_str(), m.command.as_deref(), m.args.join("|")))
        .collect();
    assert_eq!(
        servers,
        [
            (
                "uvx",
                Some("uvx"),
                "mcp-server-git|--repository|/data/a repo".into()
            ),
            (
                "npx",
                Some("npx"),
                "-y|@modelcontextprotocol/server-memory".to_string()
            ),
        ]
    );
    // The task's own tools stay; the servers' join them when the trainer starts them.
    assert_eq!(c.agent.tools, Task::Calculator.tools());
    // settings.json records them (another set is another run), and a file from before
    // the option, without the field, still reads as a run without servers.
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["mcp"][0]["args"][2], "/data/a repo");
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("mcp");
    let read: Settings = serde_json::from_value(old).unwrap();
    assert!(read.mcp.is_empty());
    assert_ne!(read, s);
    // The no-tool baseline has neither the task's tools nor the servers'.
    let baseline = crate::job::pipeline::no_tool_config(&c, Task::Calculator.no_tool_prompt());
    assert!(baseline.agent.tools.is_empty() && baseline.agent.mcp.is_empty());
}

#[test]
fn an_mcp_line_that_cannot_be_a_server_is_refused_with_the_reason() {
    for (line, reason) in [("", "no command"), ("uvx 'unclosed", "unbalanced quotes")] {
        let error = Cli::try_parse_from(["x", "--mcp", line])
            .err()
            .unwrap_or_else(|| panic!("`{line}` was taken"))
            .to_string();
        assert!(error.contains(reason), "{line}: {error}");
    }
}

#[test]
fn the_wiki_questions_are_recorded_only_when_natural_so_earlier_runs_still_match() {
    let templates = Settings::wiki_qa(&settings_args(&[]), "/m.gguf".into(), CallFormat::Code);
    let json = serde_json::to_value(&templates).unwrap();
    assert!(json.get("questions").is_none(), "{json}");
    let natural = Settings {
        questions: Questions::Natural,
        ..templates.clone()
    };
    let json = serde_json::to_value(&natural).unwrap();
    assert_eq!(json["questions"], "natural");
    // Another question set is another run.
    let read: Settings = serde_json::from_value(json).unwrap();
    assert_eq!(read, natural);
    assert_ne!(read, templates);
}
