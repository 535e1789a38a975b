//! `agentfly tasks arithmetic --out DIR`: the calculator agent's problems as JSONL.

use agentfly_core::data::write_jsonl;
use agentfly_tools::tasks::arithmetic::{Problem, SplitSizes, splits};
use anyhow::Context;
use std::path::{Path, PathBuf};
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
    for (count, path) in write_splits(&args.out, args.seed, sizes)? {
        println!("{count} {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes train.jsonl, val.jsonl, test.jsonl and demos.jsonl into `out`; returns each
/// file's sample count and path.
pub fn write_splits(
    out: &Path,
    seed: u64,
    sizes: SplitSizes,
) -> anyhow::Result<Vec<(usize, PathBuf)>> {
    let s = splits(seed, sizes);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
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
        let path = out.join(format!("{name}.jsonl"));
        write_jsonl(&path, &samples)?;
        written.push((samples.len(), path));
    }
    Ok(written)
}
