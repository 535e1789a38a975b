//! The wiki-qa job (`agentfly wiki-qa`): SmolLM2-135M-Instruct learns to answer questions
//! about Wikipedia's vital articles by looking them up — once with JSON tool calls
//! (Hermes) and once acting in code (the tools as Python functions in a sandbox, as L0's
//! notebook agent). Each format is the shared pipeline of [`crate::job`] in a directory of
//! its own (closed-book, initial with tools, after a narrow SFT warm start, after RL, on
//! the same held-out questions); `COMPARISON.md` beside them puts the formats side by side.

use crate::JobError;
use crate::calculator::options::RunArgs;
use crate::job::{CallFormat, Job, Settings, Task, pipeline};
use crate::report::Eval;
use crate::run_dir::read_json;
use agentfly_tools::tasks::wiki_qa::Questions;
use agentfly_trainer::run::{EvalReport, RowShape, correct_of};

/// Where a format's turn-rows variant runs, inside its directory.
const TURN_ROWS: &str = "turn-rows";
use std::path::PathBuf;

/// Options of `agentfly wiki-qa`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also train each format from its SFT model with one row per turn (L0's step-level
    /// samples, `seq-mean-token-mean`) and compare it with the whole-trajectory rows.
    #[arg(long)]
    pub turn_rows: bool,
    /// The call formats to train, in this order (default: both).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [CallFormat::Hermes, CallFormat::Code])]
    pub format: Vec<CallFormat>,
    /// The questions: `templates` (the default: a year blanked in an article's sentence, a
    /// title from a description) or `natural` (those and questions as people ask them —
    /// who made a work, a country's capital, the country a place is in — which the test
    /// split also asks in words no other split uses; run in `target/runs/wiki-qa-natural`).
    #[arg(long, value_enum, default_value_t = QuestionSet::Templates)]
    pub questions: QuestionSet,
    /// The run's options (`--out DIR` holds one directory per format).
    #[command(flatten)]
    pub run: RunArgs,
}

/// The question sets of `--questions`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionSet {
    /// The template families.
    Templates,
    /// The template and the natural families.
    Natural,
}

impl QuestionSet {
    fn questions(self) -> Questions {
        match self {
            Self::Templates => Questions::Templates,
            Self::Natural => Questions::Natural,
        }
    }
}

/// Runs every format's pipeline (each resumable), then writes the comparison.
pub fn run(args: &Args) -> Result<(), JobError> {
    let questions = args.questions.questions();
    // One directory per format under `--out`, else under the preset's directory.
    let parent = match &args.run.out {
        Some(out) => out.clone(),
        None => {
            let dir = Settings::default_dir_of(Task::WikiQa(CallFormat::Hermes), &args.run)
                .parent()
                .map(PathBuf::from)
                .unwrap_or_default();
            match questions {
                Questions::Templates => dir,
                Questions::Natural => PathBuf::from(format!("{}-natural", dir.display())),
            }
        }
    };
    let mut jobs = Vec::new();
    for &format in &args.format {
        let out = Some(parent.join(format.name()));
        let job = Job::prepare_task_with(Task::WikiQa(format), &args.run, out, |s| {
            s.questions = questions;
        })?;
        // The closed book has no call format: the formats after the first take its
        // evaluation from the one before (the same prompts, token for token).
        pipeline::run_beside(&job, jobs.last().map(|(_, j): &(CallFormat, Job)| j))?;
        if args.turn_rows {
            eprintln!(
                "{} format, one row per turn: RL from the SFT model",
                format.name()
            );
            let settings = Settings {
                rows: RowShape::Turns,
                ..job.builtin()?.clone()
            };
            let report = job.variant(&job.path(TURN_ROWS), &settings)?;
            eprintln!("{}", crate::evaluation::summary_line("turn rows", &report));
        }
        jobs.push((format, job));
    }
    let md = comparison(&jobs)?;
    let path = parent.join("COMPARISON.md");
    crate::run_dir::write(&path, &md)?;
    println!("{md}");
    eprintln!("comparison: {}", path.display());
    Ok(())
}

/// The formats side by side: every evaluation of the test split, then each format's RL
/// gain over its SFT row.
fn comparison(jobs: &[(CallFormat, Job)]) -> Result<String, JobError> {
    let mut rows = Vec::new();
    let mut verdicts = String::new();
    for (format, job) in jobs {
        let mut evals = job.evals()?;
        if let Some(report) = read_json::<EvalReport>(&job.path(TURN_ROWS).join("final.json"))? {
            evals.push(Eval {
                key: "turns".into(),
                title: "after RL, one row per turn".into(),
                report,
            });
        }
        for e in &evals {
            rows.push(Eval {
                key: format!("{}-{}", format.name(), e.key),
                title: format!("{}: {}", format.name(), e.title),
                report: e.report.clone(),
            });
        }
        verdicts.push_str(&crate::report::held_out::verdicts(
            &evals,
            &[crate::report::Comparison {
                after: "final",
                before: "sft",
                what: &format!("{} format: RL over SFT", format.name()),
            }],
            "questions",
        ));
    }
    let (test, families) = match jobs.first() {
        Some((_, job)) => {
            let test = job.split("test")?;
            (test.len(), by_family(&rows, &test))
        }
        None => (0, String::new()),
    };
    Ok(format!(
        "# Wiki agents: JSON tool calls against code as action\n\n\
         Exact match (SQuAD normalisation) on the same {test} held-out questions; each format's \
         own report is in its directory.\n\n{}\n{verdicts}\n\
         ## By question family\n\n\
         Exact matches per family of the test split, and the mean token F1 over all questions; \
         then each format's RL row against its SFT row on the same questions of each family \
         (gained, lost, exact McNemar p).\n\n\
         {families}",
        crate::report::table(&rows)
    ))
}

/// Each evaluation's exact matches per question family (the test samples' `family`, in
/// their order of first appearance) and its mean token F1 (the reward's `f1` metric).
fn by_family(rows: &[Eval], test: &[agentfly_core::Sample]) -> String {
    use crate::report::paired::Paired;
    use std::collections::HashMap;
    use std::fmt::Write;
    let family_of: HashMap<&str, &str> = test
        .iter()
        .filter_map(|s| Some((s.id.as_str(), s.field("family")?.as_str()?)))
        .collect();
    let mut families: Vec<&str> = Vec::new();
    for s in test {
        if let Some(f) = family_of.get(s.id.as_str())
            && !families.contains(f)
        {
            families.push(f);
        }
    }
    let mut out = format!("| policy | {} | token F1 |\n|---|", families.join(" | "));
    out.push_str(&"---|".repeat(families.len() + 1));
    out.push('\n');
    for e in rows {
        let trajectories = &e.report.trajectories;
        let cells: Vec<String> = families
            .iter()
            .map(|f| {
                let of_family = trajectories
                    .iter()
                    .filter(|t| family_of.get(t.sample_id.as_str()) == Some(f));
                let (n, correct) =
                    of_family.fold((0, 0), |(n, c), t| (n + 1, c + usize::from(correct_of(t))));
                format!("{correct}/{n}")
            })
            .collect();
        let f1: Vec<f64> = trajectories
            .iter()
            .filter_map(|t| t.reward_metrics.get("f1").copied())
            .collect();
        let f1 = if f1.is_empty() {
            "—".to_string()
        } else {
            format!("{:.3}", f1.iter().sum::<f64>() / f1.len() as f64)
        };
        let _ = writeln!(out, "| {} | {} | {f1} |", e.title, cells.join(" | "));
    }
    // Each RL row paired with the SFT row of its format, family by family.
    for after in rows.iter().filter(|e| e.key.ends_with("-final")) {
        let prefix = after.key.trim_end_matches("final");
        let Some(before) = rows.iter().find(|e| e.key == format!("{prefix}sft")) else {
            continue;
        };
        let cells: Vec<String> = families
            .iter()
            .map(|f| {
                let of_family = |id: &str| family_of.get(id) == Some(f);
                match Paired::of_items(&after.report, &before.report, of_family) {
                    Some(p) => p.counts(),
                    None => "—".into(),
                }
            })
            .collect();
        let all = Paired::of(&after.report, &before.report)
            .map(|p| format!("all: {}", p.counts()))
            .unwrap_or_else(|| "—".into());
        let _ = writeln!(
            out,
            "| {} against SFT, paired | {} | {all} |",
            after.title,
            cells.join(" | ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentfly_core::{Sample, Trajectory};
    use serde_json::json;

    fn answered(id: &str, correct: bool, f1: f64) -> Trajectory {
        Trajectory {
            sample_id: id.into(),
            reward: Some(f32::from(u8::from(correct))),
            reward_metrics: [("correct", f64::from(u8::from(correct))), ("f1", f1)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Trajectory::default()
        }
    }

    #[test]
    fn by_family_counts_each_family_of_the_test_split() {
        let test: Vec<Sample> = [("q0", "named"), ("q1", "masked"), ("q2", "named")]
            .into_iter()
            .map(|(id, family)| Sample::new(id, json!({"question": id, "family": family})))
            .collect();
        let trajectories = vec![
            answered("q0", true, 1.0),
            answered("q1", false, 0.5),
            answered("q2", false, 0.0),
        ];
        let report = EvalReport::of(trajectories, Default::default());
        let after = EvalReport::of(
            vec![
                answered("q0", false, 0.0),
                answered("q1", true, 1.0),
                answered("q2", true, 1.0),
            ],
            Default::default(),
        );
        let rows = [
            Eval {
                key: "code-sft".into(),
                title: "code: after SFT".into(),
                report,
            },
            Eval {
                key: "code-final".into(),
                title: "code: after RL".into(),
                report: after,
            },
        ];
        let table = by_family(&rows, &test);
        assert!(
            table.starts_with("| policy | named | masked | token F1 |"),
            "{table}"
        );
        assert!(
            table.contains("| code: after SFT | 1/2 | 0/1 | 0.500 |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| code: after RL against SFT, paired | +1 −1, p = 1.00 | +1 −0, p = 1.00 | \
                 all: +2 −1, p = 1.00 |"
            ),
            "{table}"
        );
    }
}
