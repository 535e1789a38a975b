//! A BM25 index of the corpus (tantivy), built once and cached on disk beside a manifest
//! that names the corpus it was built from; a changed corpus file is indexed again.

use super::corpus::{Article, Corpus, title_key};
use super::error::WikiError;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{
    Field, INDEXED, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument};

/// Bumped when the schema or the analysis changes, so old caches are rebuilt.
const INDEX_VERSION: u32 = 2;

/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 200;

/// One search result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    /// The article's title.
    pub title: String,
    /// Its BM25 score.
    pub score: f32,
    /// A short piece of it: the description, then the sentence that shares most words
    /// with the query.
    pub snippet: String,
    /// The article's position in the corpus.
    pub article: usize,
}

/// What the cache's manifest records about the corpus the index was built from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Manifest {
    version: u32,
    corpus_bytes: u64,
    corpus_hash: u64,
    articles: usize,
}

/// The corpus and its BM25 index (title, then description and summary, English stemming,
/// tantivy's k1 = 1.2, b = 0.75). Read-only and `Sync`: share one behind an `Arc` among all chains.
pub struct WikiIndex {
    corpus: Corpus,
    reader: IndexReader,
    parser: QueryParser,
    id: Field,
    dir: PathBuf,
}

impl std::fmt::Debug for WikiIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WikiIndex")
            .field("articles", &self.corpus.len())
            .field("dir", &self.dir)
            .finish()
    }
}

struct Fields {
    schema: Schema,
    id: Field,
    title: Field,
    body: Field,
}

fn fields() -> Fields {
    let mut builder = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let id = builder.add_u64_field("id", INDEXED | STORED);
    let title = builder.add_text_field("title", text.clone());
    let body = builder.add_text_field("body", text);
    Fields {
        schema: builder.build(),
        id,
        title,
        body,
    }
}

/// The file beside the index that names the corpus it was built from.
const MANIFEST: &str = "agentfly-manifest.json";

/// The manifest of the index in `dir`, when there is a readable one.
fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join(MANIFEST)).ok()?;
    serde_json::from_str(&text).ok()
}

/// A stable fingerprint of the corpus file (SipHash of its bytes; a new Rust release may
/// change it, which costs one rebuild).
fn fingerprint(bytes: &[u8]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// The query's words only: tantivy's query syntax (`field:`, quotes, `AND`, `-`) is not
/// for the model to trip over.
fn plain_words(query: &str) -> String {
    query
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect::<String>()
        .split_whitespace()
        .filter(|w| !matches!(*w, "AND" | "OR" | "NOT" | "IN"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The description, then the summary's sentence that shares most words with `query`, cut
/// to [`SNIPPET_CHARS`].
fn snippet(article: &Article, query: &str) -> String {
    let words: Vec<String> = title_key(query)
        .split(' ')
        .filter(|w| w.len() > 2)
        .map(str::to_string)
        .collect();
    let sentences = article.summary.split_inclusive(". ");
    let best = sentences
        .enumerate()
        .max_by_key(|(i, s)| {
            let key = title_key(s);
            let in_sentence: Vec<&str> = key.split(' ').collect();
            let shared = words
                .iter()
                .filter(|w| in_sentence.contains(&String::as_str(w)))
                .count();
            (shared, std::cmp::Reverse(*i))
        })
        .map(|(_, s)| s.trim())
        .unwrap_or("");
    let text = if article.description.is_empty() {
        best.to_string()
    } else {
        format!("({}) {best}", article.description)
    };
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

impl WikiIndex {
    /// Opens the index cached in `cache_dir` for the corpus at `corpus_path`, building it
    /// (with a progress bar) when it is absent, unreadable or made from another corpus.
    pub fn open_or_build(
        corpus_path: &Path,
        cache_dir: &Path,
    ) -> Result<Arc<WikiIndex>, WikiError> {
        let bytes = std::fs::read(corpus_path).map_err(|e| WikiError::io(corpus_path, e))?;
        let corpus = Corpus::parse(&bytes, corpus_path)?;
        let manifest = Manifest {
            version: INDEX_VERSION,
            corpus_bytes: bytes.len() as u64,
            corpus_hash: fingerprint(&bytes),
            articles: corpus.len(),
        };
        drop(bytes);
        let dir = cache_dir.join("wiki-index");
        let cached = (read_manifest(&dir).as_ref() == Some(&manifest))
            .then(|| Index::open_in_dir(&dir).ok())
            .flatten();
        let index = match cached {
            Some(index) => index,
            None => {
                Self::build(&corpus, &dir, &manifest)?;
                Index::open_in_dir(&dir)?
            }
        };
        Ok(Arc::new(Self::with_index(corpus, index, dir)?))
    }

    /// An index of `corpus` in memory (tests, small corpora).
    pub fn in_memory(corpus: Corpus) -> Result<WikiIndex, WikiError> {
        let f = fields();
        let index = Index::create_in_ram(f.schema.clone());
        Self::fill(&index, &f, &corpus, false)?;
        Self::with_index(corpus, index, PathBuf::new())
    }

    fn build(corpus: &Corpus, dir: &Path, manifest: &Manifest) -> Result<(), WikiError> {
        let parent = dir.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| WikiError::io(parent, e))?;
        let tmp = tempfile::Builder::new()
            .prefix("wiki-index.building-")
            .tempdir_in(parent)
            .map_err(|e| WikiError::io(parent, e))?;
        let f = fields();
        let index = Index::create_in_dir(tmp.path(), f.schema.clone())?;
        Self::fill(&index, &f, corpus, true)?;
        drop(index);
        let manifest_text = serde_json::to_string_pretty(manifest).expect("plain data");
        let manifest_path = tmp.path().join(MANIFEST);
        std::fs::write(&manifest_path, manifest_text)
            .map_err(|e| WikiError::io(&manifest_path, e))?;
        // Swap the finished index in whole: a reader never sees half of one. Another
        // process may have built the same index meanwhile: then its copy is kept.
        let stale = read_manifest(dir).is_none_or(|m| m != *manifest);
        if dir.exists() && stale {
            std::fs::remove_dir_all(dir).map_err(|e| WikiError::io(dir, e))?;
        }
        let built = tmp.keep();
        if let Err(e) = std::fs::rename(&built, dir) {
            let _ = std::fs::remove_dir_all(&built);
            if read_manifest(dir).as_ref() != Some(manifest) {
                return Err(WikiError::io(dir, e));
            }
        }
        Ok(())
    }

    fn fill(index: &Index, f: &Fields, corpus: &Corpus, progress: bool) -> Result<(), WikiError> {
        let mut writer: tantivy::IndexWriter = index.writer_with_num_threads(1, 50_000_000)?;
        let bar = if progress {
            indicatif::ProgressBar::new(corpus.len() as u64)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "indexing the wiki corpus {bar:30} {pos}/{len} articles ({elapsed})",
            )
            .expect("a valid template"),
        );
        for (i, article) in corpus.articles().iter().enumerate() {
            let mut doc = TantivyDocument::default();
            doc.add_u64(f.id, i as u64);
            doc.add_text(f.title, &article.title);
            // Wikipedia's own search reads the short description too: "Which article is
            // the central text of Rabbinic Judaism?" finds the Talmud by it.
            doc.add_text(f.body, &article.description);
            doc.add_text(f.body, &article.summary);
            writer.add_document(doc)?;
            bar.inc(1);
        }
        writer.commit()?;
        writer.wait_merging_threads()?;
        bar.finish_and_clear();
        Ok(())
    }

    fn with_index(corpus: Corpus, index: Index, dir: PathBuf) -> Result<WikiIndex, WikiError> {
        let schema = index.schema();
        let get = |name: &str| {
            schema
                .get_field(name)
                .map_err(|_| WikiError::Corpus(format!("the index has no field `{name}`")))
        };
        let (id, title, body) = (get("id")?, get("title")?, get("body")?);
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let mut parser = QueryParser::for_index(&index, vec![title, body]);
        parser.set_field_boost(title, 2.0);
        Ok(WikiIndex {
            corpus,
            reader,
            parser,
            id,
            dir,
        })
    }

    /// The corpus.
    pub fn corpus(&self) -> &Corpus {
        &self.corpus
    }

    /// Where the index lives on disk (empty for an in-memory one).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn top(
        &self,
        parser: &QueryParser,
        query: &str,
        k: usize,
    ) -> Result<Vec<(f32, usize)>, WikiError> {
        let words = plain_words(query);
        if words.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let (query, _errors) = parser.parse_query_lenient(&words);
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(k).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            if let Some(i) = doc.get_first(self.id).and_then(|v| v.as_u64()) {
                out.push((score, i as usize));
            }
        }
        Ok(out)
    }

    /// The `k` articles that best match `query` (BM25 over title, description and summary,
    /// titles weighted double), best first.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>, WikiError> {
        Ok(self
            .top(&self.parser, query, k)?
            .into_iter()
            .map(|(score, i)| {
                let article = &self.corpus.articles()[i];
                Hit {
                    title: article.title.clone(),
                    score,
                    snippet: snippet(article, query),
                    article: i,
                }
            })
            .collect())
    }

    /// The article titled `title` (ignoring case, spacing and punctuation); for an
    /// unknown title, [`WikiError::UnknownTitle`] with the closest titles.
    pub fn retrieve(&self, title: &str) -> Result<&Article, WikiError> {
        if let Some(article) = self.corpus.get(title) {
            return Ok(article);
        }
        Err(WikiError::UnknownTitle {
            title: title.to_string(),
            closest: self.closest_titles(title, 5)?,
        })
    }

    /// The `n` titles closest to `title`: the articles that best match it, as
    /// [`search`](Self::search) ranks them (titles weighted double, so a misspelt title
    /// still finds its namesakes, and a sentence finds the article it comes from).
    pub fn closest_titles(&self, title: &str, n: usize) -> Result<Vec<String>, WikiError> {
        Ok(self
            .top(&self.parser, title, n)?
            .into_iter()
            .map(|(_, i)| self.corpus.articles()[i].title.clone())
            .collect())
    }
}
