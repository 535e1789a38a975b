//! `search` and `retrieve`: the agent's access to a local encyclopedia, over one shared,
//! read-only [`WikiIndex`] that the binary installs with [`install`].
//!
//! Both are plain (stateless) tools: any number of chains call them at once, each call
//! a BM25 query of a few milliseconds on tokio's blocking pool.

use agentfly_core::tool;
use agentfly_envs::wiki::{Article, DEFAULT_CORPUS, WikiError, WikiIndex};
use std::path::Path;
use std::sync::{Arc, RwLock};

/// The name of the encyclopedia's file among a run's resources (`[agent] resources`).
pub const CORPUS_RESOURCE: &str = "wiki_corpus";

/// The most results one search gives.
pub const MAX_RESULTS: usize = 10;

static INDEX: RwLock<Option<Arc<WikiIndex>>> = RwLock::new(None);

/// Makes `index` the one `search` and `retrieve` read (replacing any earlier one).
pub fn install(index: Arc<WikiIndex>) {
    *INDEX.write().unwrap_or_else(|e| e.into_inner()) = Some(index);
}

/// The installed index.
pub fn installed() -> Option<Arc<WikiIndex>> {
    INDEX.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The index of the corpus file at `corpus`, cached beside it (`wiki-index/`): opened, or
/// built once when absent or made from another corpus.
pub fn open_cached(corpus: &Path) -> Result<Arc<WikiIndex>, WikiError> {
    WikiIndex::open_or_build(corpus, corpus.parent().unwrap_or(Path::new(".")))
}

/// The installed index; when none is, the default corpus's (`corpora/wiki/`, relative to
/// the working directory), opened or built on first use and installed.
fn index() -> Result<Arc<WikiIndex>, String> {
    if let Some(index) = installed() {
        return Ok(index);
    }
    let mut slot = INDEX.write().unwrap_or_else(|e| e.into_inner());
    if let Some(index) = slot.as_ref() {
        return Ok(index.clone());
    }
    let corpus = Path::new(DEFAULT_CORPUS);
    if !corpus.exists() {
        return Err(format!(
            "no encyclopedia is loaded: {} is missing (run `agentfly fetch-corpus`, or have \
             the binary call agentfly_tools::wiki::install)",
            corpus.display()
        ));
    }
    let index = open_cached(corpus).map_err(|e| e.to_string())?;
    *slot = Some(index.clone());
    Ok(index)
}

/// Searches the encyclopedia (summaries of ~10,000 Wikipedia articles) and lists the
/// best-matching article titles, each with a short snippet. Use `retrieve` to read one.
#[tool(max_output_chars = 2500, timeout_ms = 10000)]
pub fn search(
    /// What to look for: a few keywords or a name.
    query: String,
    /// How many results to list (1 to 10; default 3).
    k: Option<usize>,
) -> Result<String, String> {
    search_text(&*index()?, &query, k).map_err(|e| e.to_string())
}

/// What `search` shows for `query` on `index`: `k` (default 3, at most [`MAX_RESULTS`])
/// numbered results, each its title and snippet.
pub fn search_text(index: &WikiIndex, query: &str, k: Option<usize>) -> Result<String, WikiError> {
    let k = k.unwrap_or(3).clamp(1, MAX_RESULTS);
    let hits = index.search(query, k)?;
    if hits.is_empty() {
        return Ok(format!("No article matches \"{query}\"."));
    }
    Ok(hits
        .iter()
        .enumerate()
        .map(|(i, h)| format!("{}. {}: {}", i + 1, h.title, h.snippet))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Reads the summary of the encyclopedia article with this exact title (as `search` lists
/// it). An unknown title gives the closest titles.
#[tool(max_output_chars = 3000, timeout_ms = 10000)]
pub fn retrieve(
    /// The article's title.
    title: String,
) -> Result<String, String> {
    let index = index()?;
    let article = index.retrieve(&title).map_err(|e| e.to_string())?;
    Ok(article_text(article))
}

/// What `retrieve` shows of an article: its title (and description), then its summary.
pub fn article_text(article: &Article) -> String {
    let mut text = article.title.clone();
    if !article.description.is_empty() {
        text.push_str(&format!(" ({})", article.description));
    }
    text.push('\n');
    text.push_str(&article.summary);
    text
}
