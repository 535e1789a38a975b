//! The stages of the main job. Each writes its result into the run directory when it
//! finishes and is skipped when that result is already there; RL resumes from its last
//! checkpoint. So an interrupted run (Ctrl-C, a crash) continues where it stopped.

use super::{NO_TOOL_PROMPT, Run, report, write};
use agentfly_core::data::{Sample, read_jsonl};
use agentfly_tools::tasks::arithmetic::{SplitSizes, check_disjoint};
use agentfly_trainer::run::{EvalReport, SFT_MODEL, SftReport, Trainer, TrainerConfig};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::Path;

/// The splits, as `data/<name>.jsonl`.
pub const SPLITS: [&str; 4] = ["train", "val", "test", "demos"];

/// The evaluations on the test split, in the report's order: file stem and row title.
pub const EVALS: [(&str, &str); 4] = [
    ("no_tools", "initial, no tools"),
    ("initial", "initial"),
    ("sft", "after SFT"),
    ("final", "after RL"),
];

/// Validation accuracy after an RL step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValPoint {
    /// The step.
    pub step: usize,
    /// Problems solved.
    pub correct: usize,
    /// Problems.
    pub samples: usize,
    /// Their share.
    pub accuracy: f64,
    /// The 95% interval.
    pub interval: (f64, f64),
    /// Seconds the evaluation took.
    #[serde(default)]
    pub seconds: f64,
}

/// Writes the splits from the problem generator when they are not there yet, then reads
/// them back and checks that no question is in two of them.
pub fn write_data(run: &Run) -> anyhow::Result<()> {
    let dir = run.path("data");
    if SPLITS
        .iter()
        .any(|s| !dir.join(format!("{s}.jsonl")).exists())
    {
        let s = &run.settings;
        let sizes = SplitSizes {
            train: s.train,
            val: s.val,
            test: s.test,
            demos: s.demos,
        };
        crate::commands::tasks::write_splits(&dir, s.data_seed, sizes)?;
    }
    let data: Vec<(&str, Vec<Sample>)> = SPLITS
        .iter()
        .map(|s| Ok((*s, read_jsonl(dir.join(format!("{s}.jsonl")))?)))
        .collect::<anyhow::Result<_>>()?;
    let named: Vec<(&str, &[Sample])> = data.iter().map(|(n, d)| (*n, d.as_slice())).collect();
    check_disjoint(&named).map_err(|o| {
        anyhow::anyhow!(
            "{}: the splits overlap: {} sample `{}` and {} sample `{}` ask the same question ({:?}); \
             held-out results would be meaningless (delete the data directory to regenerate it)",
            dir.display(),
            o.first,
            o.first_id,
            o.second,
            o.second_id,
            o.question
        )
    })
}

/// Runs every stage not done yet, then writes the report.
pub fn run(run: &Run) -> anyhow::Result<()> {
    let s = &run.settings;
    let config = TrainerConfig::load(run.path("run.toml"))?;
    let test = read_jsonl(run.path("data/test.jsonl"))?;
    let val = read_jsonl(run.path("data/val.jsonl"))?;
    eprintln!(
        "calculator job in {} ({} preset, {}, {} RL steps); rerun the same command to resume",
        run.dir.display(),
        s.preset,
        s.algorithm.name(),
        s.steps
    );

    stage(run, "no_tools", "1/5 initial policy without tools", || {
        let trainer = Trainer::with_model(no_tool_config(&config), &s.model)?;
        evaluate(&trainer, &test, "no tools")
    })?;
    stage(
        run,
        "initial",
        "2/5 initial policy with the calculator",
        || {
            let trainer = Trainer::with_model(config.clone(), &s.model)?;
            evaluate(&trainer, &test, "initial")
        },
    )?;

    let mut trainer = Trainer::new(config.clone())?;
    let sft_model = config.output.dir.join(SFT_MODEL);
    if !sft_model.join("config.json").exists() {
        if trainer.step() > 0 {
            bail!(
                "{} is missing although RL has started; pass --restart to start over",
                sft_model.display()
            );
        }
        eprintln!(
            "3/5 SFT warm start on {} demonstrations ({} epoch(s))",
            s.demos, s.sft_epochs
        );
        if let Some(report) = trainer.sft()? {
            eprintln!(
                "    loss {:.4} -> {:.4}, {} updates, {:.0}s",
                report.first_epoch_loss, report.last_epoch_loss, report.updates, report.seconds
            );
            write(
                &run.path("sft.json"),
                &serde_json::to_string_pretty(&report)?,
            )?;
        } else {
            // SFT finished but its model was not written (an older checkpoint).
            trainer.save_model(&sft_model)?;
        }
    }
    stage(run, "sft", "3/5 policy after SFT", || {
        if trainer.step() == 0 {
            evaluate(&trainer, &test, "after SFT")
        } else {
            let sft = Trainer::with_model(config.clone(), &sft_model)?;
            evaluate(&sft, &test, "after SFT")
        }
    })?;

    eprintln!(
        "4/5 RL: {} steps of {} problems x {} chains ({})",
        s.steps,
        s.samples_per_step,
        s.chains,
        s.algorithm.name()
    );
    if trainer.step() > 0 {
        eprintln!("    resuming RL from step {}", trainer.step());
    }
    let val_path = run.path("val.jsonl");
    let mut points = read_val(&val_path)?;
    points.retain(|p| p.step <= trainer.step());
    write(&val_path, &jsonl(&points)?)?;
    let due =
        |step: usize| step > 0 && (step.is_multiple_of(s.eval_every.max(1)) || step == s.steps);
    if due(trainer.step()) && points.last().is_none_or(|p| p.step < trainer.step()) {
        let point = validate(&trainer, &val, trainer.step(), None)?;
        append_val(&val_path, &point)?;
    }
    trainer.train_with(|t, m, bar| {
        if due(m.step) {
            let point = validate(t, &val, m.step, Some(bar))?;
            let line = format!(
                "validation after step {}: {}/{} = {:.3} (95% CI {:.3}-{:.3})",
                point.step,
                point.correct,
                point.samples,
                point.accuracy,
                point.interval.0,
                point.interval.1
            );
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
            append_val(&val_path, &point)?;
        }
        Ok(())
    })?;

    stage(run, "final", "5/5 policy after RL", || {
        evaluate(&trainer, &test, "after RL")
    })?;
    drop(trainer);
    let path = report::write_report(run)?;
    eprintln!("report: {}", path.display());
    println!("{}", report::table(&report::load_evals(run)?));
    Ok(())
}

/// The configuration of the no-tool baseline: the same model, budgets and reward, no
/// tools, one turn, room to write a worked answer.
pub fn no_tool_config(config: &TrainerConfig) -> TrainerConfig {
    let mut c = config.clone();
    c.agent.tools.clear();
    c.agent.system_prompt = NO_TOOL_PROMPT.into();
    c.agent.system_prompt_file = None;
    c.agent.format_bonus = 0.0;
    c.chain.max_turns = 1;
    c.chain.max_tokens_per_turn = 128;
    c.sft = None;
    c
}

/// Runs an evaluation stage unless its result is in `evals/`, and prints its line.
fn stage(
    run: &Run,
    key: &str,
    title: &str,
    compute: impl FnOnce() -> anyhow::Result<EvalReport>,
) -> anyhow::Result<EvalReport> {
    let path = run.path(&format!("evals/{key}.json"));
    let report = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("reading {} (delete it to redo the stage)", path.display()))?,
        Err(_) => {
            eprintln!("{title}");
            let report = compute()?;
            std::fs::create_dir_all(run.path("evals"))?;
            write(&path, &serde_json::to_string(&report)?)?;
            report
        }
    };
    eprintln!(
        "    {key}: {}/{} correct = {:.3} (95% CI {:.3}-{:.3}), tool calls in {:.0}% of answers",
        report.correct,
        report.samples,
        report.accuracy,
        report.interval.0,
        report.interval.1,
        report.tool_call_rate * 100.0
    );
    Ok(report)
}

/// Greedy evaluation with a progress bar.
fn evaluate(trainer: &Trainer, samples: &[Sample], label: &str) -> anyhow::Result<EvalReport> {
    let bar = ProgressBar::new(samples.len() as u64).with_style(
        ProgressStyle::with_template("    {prefix} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    let report = trainer.evaluate_with(samples, |_| bar.inc(1))?;
    bar.finish_and_clear();
    Ok(report)
}

/// Greedy accuracy on the validation split after `step`; progress in `bar`'s message.
fn validate(
    trainer: &Trainer,
    val: &[Sample],
    step: usize,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<ValPoint> {
    let mut done = 0;
    let report = trainer.evaluate_with(val, |_| {
        done += 1;
        if let Some(bar) = bar {
            bar.set_message(format!("validation {done}/{}", val.len()));
        }
    })?;
    Ok(ValPoint {
        step,
        correct: report.correct,
        samples: report.samples,
        accuracy: report.accuracy,
        interval: report.interval,
        seconds: report.summary.wall_seconds,
    })
}

/// The validation points written so far.
pub fn read_val(path: &Path) -> anyhow::Result<Vec<ValPoint>> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("reading {}", path.display())))
            .collect(),
        Err(_) => Ok(Vec::new()),
    }
}

fn append_val(path: &Path, point: &ValPoint) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{}", serde_json::to_string(point)?)
        .with_context(|| format!("writing {}", path.display()))
}

fn jsonl<T: Serialize>(items: &[T]) -> anyhow::Result<String> {
    items
        .iter()
        .map(|i| serde_json::to_string(i).map(|l| l + "\n"))
        .collect::<Result<_, _>>()
        .map_err(Into::into)
}

/// The SFT stage's summary, when SFT ran in this directory.
pub fn read_sft(run: &Run) -> Option<SftReport> {
    let text = std::fs::read_to_string(run.path("sft.json")).ok()?;
    serde_json::from_str(&text).ok()
}
