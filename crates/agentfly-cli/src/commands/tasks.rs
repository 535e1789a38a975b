//! `agentfly tasks arithmetic --out DIR`: the calculator agent's problems as JSONL.

use agentfly_core::data::write_jsonl;
use agentfly_tools::tasks::arithmetic::{Problem, SplitSizes, splits};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly tasks arithmetic`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write train.jsonl, val.jsonl, test.jsonl and demos.jsonl.
    #[arg(long)]
    out: PathBuf,
    /// The seed of every split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// RL training problems (the wide mix).
    #[arg(long, default_value_t = 600)]
    train: usize,
    /// Validation problems.
    #[arg(long, default_value_t = 48)]
    val: usize,
    /// Held-out test problems.
    #[arg(long, default_value_t = 48)]
    test: usize,
    /// Warm-start demonstrations ("What is a + b?" only).
    #[arg(long, default_value_t = 32)]
    demos: usize,
}

/// Writes the splits; they are disjoint by normalised question text.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let s = splits(
        args.seed,
        SplitSizes {
            train: args.train,
            val: args.val,
            test: args.test,
            demos: args.demos,
        },
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for (name, problems, demo) in [
        ("train", &s.train, false),
        ("val", &s.val, false),
        ("test", &s.test, false),
        ("demos", &s.demos, true),
    ] {
        let samples: Vec<_> = problems
            .iter()
            .map(|p: &Problem| if demo { p.demonstration() } else { p.sample() })
            .collect();
        let path = args.out.join(format!("{name}.jsonl"));
        write_jsonl(&path, &samples)?;
        println!("{} {}", samples.len(), path.display());
    }
    Ok(ExitCode::SUCCESS)
}
