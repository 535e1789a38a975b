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
use agentfly_trainer::run::{EvalReport, RowShape};

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
    /// The run's options (`--out DIR` holds one directory per format).
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs every format's pipeline (each resumable), then writes the comparison.
pub fn run(args: &Args) -> Result<(), JobError> {
    let mut jobs = Vec::new();
    for &format in &args.format {
        let out = args.run.out.as_ref().map(|o| o.join(format.name()));
        let job = Job::prepare_task(Task::WikiQa(format), &args.run, out)?;
        pipeline::run(&job)?;
        if args.turn_rows {
            eprintln!(
                "{} format, one row per turn: RL from the SFT model",
                format.name()
            );
            let settings = Settings {
                rows: RowShape::Turns,
                ..job.settings.clone()
            };
            let report = job.variant(&job.path(TURN_ROWS), &settings)?;
            eprintln!("{}", crate::evaluation::summary_line("turn rows", &report));
        }
        jobs.push((format, job));
    }
    let parent = match &args.run.out {
        Some(out) => out.clone(),
        None => Settings::default_dir_of(Task::WikiQa(CallFormat::Hermes), &args.run)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
    };
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
        ));
    }
    let test = jobs.first().map_or(0, |(_, j)| j.settings.test);
    Ok(format!(
        "# Wiki agents: JSON tool calls against code as action\n\n\
         Exact match (SQuAD normalisation) on the same {test} held-out questions; each format's \
         own report is in its directory.\n\n{}\n{verdicts}",
        crate::report::table(&rows)
    ))
}
