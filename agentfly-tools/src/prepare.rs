//! Making a run's tools ready before its first chain, or stopping it with the reason: a
//! tool that cannot work at all (its corpus missing, no world to act in) must not turn
//! every call into an error observation and a run into a quietly wrong result.

use crate::wiki::{self, CORPUS_RESOURCE};
use agentfly_core::Toolbox;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a run's tools find what they need.
#[derive(Debug, Clone, Default)]
pub struct Needs<'a> {
    /// The run's resources by name (the trainer's `[agent] resources`, resolved against
    /// its configuration's directory).
    pub resources: Option<&'a BTreeMap<String, PathBuf>>,
    /// Where the encyclopedia is when no resource names it: for commands whose paths are
    /// all given on the command line (relative to the working directory); `None` for a
    /// run from a configuration file, which must name it.
    pub default_corpus: Option<PathBuf>,
    /// A world is configured for the tools that act in one.
    pub world: bool,
}

/// Makes the tools of `toolbox` ready (the encyclopedia's index opened, or built once, and
/// installed), or says why one of them cannot work at all.
pub fn prepare(toolbox: &Toolbox, needs: &Needs<'_>) -> Result<(), String> {
    let names = toolbox.names();
    let wiki_tools: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| ["search", "retrieve"].contains(n))
        .collect();
    if !wiki_tools.is_empty() && wiki::installed().is_none() {
        let corpus = needs
            .resources
            .and_then(|r| r.get(CORPUS_RESOURCE).cloned())
            .or_else(|| std::env::var_os("AGENTFLY_WIKI_CORPUS").map(PathBuf::from))
            .or_else(|| needs.default_corpus.clone())
            .ok_or_else(|| {
                format!(
                    "{} need(s) the encyclopedia and the configuration names none: add \
                     `resources = {{ {CORPUS_RESOURCE} = \"PATH\" }}` to its [agent] section \
                     (`agentfly fetch-corpus` fetches it), or set AGENTFLY_WIKI_CORPUS",
                    wiki_tools.join(" and ")
                )
            })?;
        install_corpus(&corpus)
            .map_err(|why| format!("{} cannot work: {why}", wiki_tools.join(" and ")))?;
    }
    let world_tools: Vec<&str> = toolbox
        .tools()
        .iter()
        .filter(|t| t.options.env.is_some_and(|e| e.ends_with("RemoteEnv")))
        .map(|t| t.name)
        .collect();
    if !world_tools.is_empty() && !needs.world {
        return Err(format!(
            "{} act(s) in a world and none is configured here (`agentfly rollout --world` \
             or `--remote-url` give one; a training configuration cannot: run the \
             `agentfly textworld` job)",
            world_tools.join(", ")
        ));
    }
    Ok(())
}

/// Opens (or builds once) the index of the corpus at `corpus` and installs it.
fn install_corpus(corpus: &Path) -> Result<(), String> {
    if !corpus.is_file() {
        return Err(format!(
            "the encyclopedia {} is missing (`agentfly fetch-corpus --out {}` fetches it)",
            corpus.display(),
            corpus.display()
        ));
    }
    let index = wiki::open_cached(corpus).map_err(|e| e.to_string())?;
    wiki::install(index);
    Ok(())
}
