//! `agentfly tasks arithmetic --out DIR`: the calculator agent's problems as JSONL.

use agentfly_tools::tasks::arithmetic::{SplitSizes, splits};
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
    let sizes = SplitSizes {
        train: args.train,
        val: args.val,
        test: args.test,
        demos: args.demos,
    };
    let splits = splits(args.seed, sizes).map_err(|e| {
        let option = if e.split == "demo" {
            "demos"
        } else {
            e.split.as_str()
        };
        anyhow::anyhow!("--{option}: {e}")
    })?;
    for (count, path) in splits.write(&args.out)? {
        println!("{count} {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
