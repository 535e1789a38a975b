//! `agentfly run TASK.toml` end to end on the real SmolLM2, as a user with a task of their
//! own runs it: a task file over real data (the arithmetic generator's splits, without
//! demonstrations, so without SFT), its smoke preset run through every stage into a report, the run's own `task.toml` reproducing it
//! (a rerun is a resume that redoes nothing), and a rerun with another value or changed
//! data refused; a mistake in the file named by file, line and key.

use std::path::Path;
use std::process::{Command, Output};

fn agentfly(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentfly"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn ok(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "failed: {stderr}");
    format!("{}{stderr}", String::from_utf8_lossy(&output.stdout))
}

fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const TASK: &str = r#"[task]
name = "sums"
items = "problems"
eval_every = 1

[data]
train = "data/train.jsonl"
val = "data/val.jsonl"
test = "data/test.jsonl"

[model]
path = "MODEL"

[agent]
tools = ["calculator", "submit_answer"]
reward = "exact_numeric"
system_prompt_file = "system.txt"

[chain]
max_turns = 3
max_tokens_per_turn = 48

[rollout]
chains = 2
samples_per_step = 2

[train]
steps = 10

[output]
checkpoint_every = 1
keep_checkpoints = 1

[presets.smoke]
train.steps = 1
"#;

const PROMPT: &str = "You solve arithmetic problems with a calculator tool. Write
<tool_call>
{\"name\": \"calculator\", \"arguments\": {\"expression\": \"<expression>\"}}
</tool_call>
then submit the number with
<tool_call>
{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"<number>\"}}
</tool_call>
";

#[test]
fn a_task_file_runs_the_pipeline_resumes_and_refuses_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sums");
    std::fs::create_dir_all(&project).unwrap();
    ok(&agentfly(
        &[
            "tasks",
            "arithmetic",
            "--out",
            "data",
            "--seed",
            "7",
            "--train",
            "12",
            "--val",
            "2",
            "--test",
            "4",
            "--demos",
            "4",
        ],
        &project,
    ));
    let model = agentfly_testdata::smollm2_gguf();
    std::fs::write(
        project.join("task.toml"),
        TASK.replace("MODEL", &model.display().to_string()),
    )
    .unwrap();
    std::fs::write(project.join("system.txt"), PROMPT).unwrap();

    // A mistake: the file, the line and the key; nothing is made.
    std::fs::write(
        project.join("bad.toml"),
        TASK.replace("chains = 2", "chians = 2"),
    )
    .unwrap();
    let e = refused(&agentfly(&["run", "bad.toml", "--out", "bad"], &project));
    assert!(
        e.contains("bad.toml: line 24") && e.contains("unknown field `chians`"),
        "{e}"
    );
    assert!(!project.join("bad").exists());

    // The smoke preset, every stage.
    let out = ok(&agentfly(
        &["run", "task.toml", "--preset", "smoke", "--out", "run"],
        &project,
    ));
    let run = project.join("run");
    for file in [
        "evals/initial.json",
        "evals/final.json",
        "val.jsonl",
        "out/metrics.jsonl",
        "data/test.jsonl",
        "run.toml",
        "report/REPORT.md",
    ] {
        assert!(run.join(file).exists(), "{file} missing; output:\n{out}");
    }
    // No closed-book prompt, no such baseline; no demonstrations, no SFT.
    for absent in [
        "evals/no_tools.json",
        "evals/sft.json",
        "sft.json",
        "out/sft-model",
    ] {
        assert!(!run.join(absent).exists(), "{absent}");
    }
    assert_eq!(
        agentfly_testdata::json_lines(&run.join("out/metrics.jsonl")).len(),
        1
    );
    let report = std::fs::read_to_string(run.join("report/REPORT.md")).unwrap();
    for words in [
        "# sums agent",
        "smoke preset: 12 training, 2 validation and 4 test problems",
        "no SFT; 1 RL steps",
        "RL over the initial policy",
        "tools: calculator, submit_answer",
    ] {
        assert!(
            report.contains(words),
            "`{words}` not in the report:\n{report}"
        );
    }
    ok(&agentfly(
        &["config", "show", "--config", "run/run.toml"],
        &project,
    ));

    // The run's own task file is the effective one: running it is a resume that redoes
    // nothing.
    let final_eval = std::fs::read(run.join("evals/final.json")).unwrap();
    let again = ok(&agentfly(
        &["run", "run/task.toml", "--out", "run"],
        &project,
    ));
    assert!(!again.contains("4/5 RL"), "{again}");
    assert_eq!(
        std::fs::read(run.join("evals/final.json")).unwrap(),
        final_eval
    );

    // Another value, or changed data, is refused.
    let e = refused(&agentfly(
        &[
            "run",
            "task.toml",
            "--preset",
            "smoke",
            "--set",
            "optim.lr=1e-4",
            "--out",
            "run",
        ],
        &project,
    ));
    assert!(e.contains("other settings") && e.contains("optim"), "{e}");
    let test = project.join("data/test.jsonl");
    let lines = std::fs::read_to_string(&test).unwrap();
    let mut reversed: Vec<&str> = lines.lines().collect();
    reversed.reverse();
    std::fs::write(&test, reversed.join("\n") + "\n").unwrap();
    let e = refused(&agentfly(
        &["run", "task.toml", "--preset", "smoke", "--out", "run"],
        &project,
    ));
    assert!(
        e.contains("data.test") && e.contains("differs from the copy"),
        "{e}"
    );
}
