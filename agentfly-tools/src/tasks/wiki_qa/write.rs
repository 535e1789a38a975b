//! The questions written out: as samples, as demonstrations whose tools' output is what
//! the real tools return, and into the split files; and the check that no two splits ask
//! about one article.

use super::{Family, Question, Splits, masked_description};
use crate::wiki::{article_text, search_text};
use agentfly_core::Sample;
use agentfly_core::data::DataError;
use agentfly_envs::wiki::WikiIndex;
use serde_json::json;
use std::path::{Path, PathBuf};

/// How a demonstration writes its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoFormat {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Hermes).
    Hermes,
    /// A fenced Python block that calls the tools as functions (code-as-action).
    Code,
}

impl Question {
    /// As a dataset sample: `question`, `answer` (what the SQuAD rewards read), `family`
    /// and `article`.
    pub fn sample(&self) -> Sample {
        Sample::new(
            self.id.clone(),
            json!({
                "question": self.question,
                "answer": self.answer,
                "family": self.family,
                "article": self.article,
            }),
        )
    }

    /// As a demonstration in `format`, each tool's output what the real tool returns on
    /// `index`: for a named article, retrieve it, read, submit the year; for a described
    /// one, search its description, retrieve the first result, read, submit. `None` when
    /// the article is not in `index`'s corpus.
    pub fn demonstration(&self, index: &WikiIndex, format: DemoFormat) -> Option<Sample> {
        let article = index.corpus().get(&self.article)?;
        // Each call: the tool, its one parameter and that parameter's value, its output.
        let mut calls = Vec::new();
        if self.family == Family::YearDescribed {
            let query = masked_description(article)?;
            let found = search_text(index, &query, None).ok()?;
            calls.push(("search", "query", query, found));
        }
        calls.push((
            "retrieve",
            "title",
            self.article.clone(),
            article_text(article),
        ));
        let mut messages = vec![json!({"role": "user", "content": self.question})];
        for (name, parameter, value, output) in calls {
            let (call, tool) = match format {
                DemoFormat::Hermes => (hermes_call(name, &json!({ parameter: value })), name),
                DemoFormat::Code => {
                    let literal = serde_json::to_string(&value).expect("a string");
                    (
                        code_cell(&format!("print({name}({literal}))")),
                        "code_interpreter",
                    )
                }
            };
            messages.push(json!({"role": "assistant", "content": call}));
            messages.push(json!({"role": "tool", "name": tool, "content": output}));
        }
        let submit = match format {
            DemoFormat::Hermes => hermes_call("submit_answer", &json!({"answer": self.answer})),
            DemoFormat::Code => {
                let answer = serde_json::to_string(&self.answer).expect("a string");
                code_cell(&format!("submit_answer({answer})"))
            }
        };
        messages.push(json!({"role": "assistant", "content": submit}));
        Some(Sample::new(
            self.id.clone(),
            json!({"messages": messages, "answer": self.answer, "article": self.article}),
        ))
    }
}

/// A Hermes tool call.
fn hermes_call(name: &str, arguments: &serde_json::Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        json!({"name": name, "arguments": arguments})
    )
}

/// A fenced Python cell.
fn code_cell(body: &str) -> String {
    format!("```python\n{body}\n```")
}

impl Splits {
    /// Writes each split into `dir` as JSON Lines (the demonstrations in `format`, their
    /// tools' output read from `index`); returns each file's sample count and path.
    pub fn write(
        &self,
        dir: &Path,
        index: &WikiIndex,
        format: DemoFormat,
    ) -> Result<Vec<(usize, PathBuf)>, DataError> {
        let samples = |questions: &[Question]| questions.iter().map(Question::sample).collect();
        let demos = self
            .demos
            .iter()
            .map(|q| q.demonstration(index, format).unwrap_or_else(|| q.sample()))
            .collect();
        super::super::write_splits(
            dir,
            &[
                ("train", samples(&self.train)),
                ("val", samples(&self.val)),
                ("test", samples(&self.test)),
                ("demos", demos),
            ],
        )
    }
}

/// Two splits share a source article.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "splits `{first}` and `{second}` both ask about the article \"{article}\": train, validation and test must be disjoint by article"
)]
pub struct SharedArticle {
    /// The first split's name.
    pub first: String,
    /// The second split's name.
    pub second: String,
    /// The shared article.
    pub article: String,
}

/// Checks that no source article (a sample's `article` field) is asked about in two of the
/// named splits.
pub fn check_articles_disjoint(splits: &[(&str, &[Sample])]) -> Result<(), SharedArticle> {
    let article = |s: &Sample| s.field("article")?.as_str().map(str::to_string);
    match super::super::first_shared(splits, article) {
        None => Ok(()),
        Some(shared) => Err(SharedArticle {
            first: shared.first,
            second: shared.second,
            article: shared.key,
        }),
    }
}
