//! What a job trains for: the calculator, wiki questions answered with search and
//! retrieve in one of two formats, or text-world games played through the remote bridge. Each task gives its tools, reward, call format, chain
//! budgets, prompts and data; the stages, settings and report are shared.

use crate::JobError;
use agentfly_core::Sample;
use agentfly_core::data::read_jsonl as read_samples;
use agentfly_core::rollout::ChainConfig;
use agentfly_envs::wiki::{CORPUS_FILE, DEFAULT_CORPUS};
use agentfly_tools::tasks::SPLIT_NAMES;
use agentfly_tools::tasks::arithmetic::{self, SplitSizes, check_disjoint};
use agentfly_tools::tasks::wiki_qa::write::{DemoFormat, check_articles_disjoint};
use agentfly_tools::tasks::wiki_qa::{self, Questions};
use agentfly_trainer::run::RolloutSection;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How the wiki agent calls its tools.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallFormat {
    /// JSON tool calls in `<tool_call>` tags.
    Hermes,
    /// Python code in a sandbox where the tools are functions (code-as-action).
    Code,
}

impl CallFormat {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Code => "code",
        }
    }
}

/// The task a job trains for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// Arithmetic with a calculator tool.
    #[default]
    Calculator,
    /// Questions about Wikipedia's vital articles, with search and retrieve.
    WikiQa(CallFormat),
    /// TextWorldExpress's TextWorld-Commonsense games, played with `act`.
    #[serde(rename = "textworld")]
    TextWorld,
}

/// The calculator's system prompt.
const CALCULATOR_PROMPT: &str = "You are a careful assistant that solves arithmetic problems with a calculator tool. You cannot compute large numbers in your head.
To use the calculator, write exactly:
<tool_call>
{\"name\": \"calculator\", \"arguments\": {\"expression\": \"<arithmetic expression>\"}}
</tool_call>
The result comes back to you. Then submit the final number with:
<tool_call>
{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"<number>\"}}
</tool_call>
";

/// The wiki agent's system prompt, Hermes format.
const WIKI_HERMES_PROMPT: &str =
    "You answer questions about an encyclopedia with its tools. Never guess: look the answer up.
To find articles, write:
<tool_call>
{\"name\": \"search\", \"arguments\": {\"query\": \"<keywords>\"}}
</tool_call>
To read an article, write:
<tool_call>
{\"name\": \"retrieve\", \"arguments\": {\"title\": \"<exact title>\"}}
</tool_call>
The result comes back to you. Then submit the answer alone (a year, or a title) with:
<tool_call>
{\"name\": \"submit_answer\", \"arguments\": {\"answer\": \"<answer>\"}}
</tool_call>
";

/// The text-world agent's system prompt.
const TEXTWORLD_PROMPT: &str = "You play a text game. Each turn, take exactly one action with:
<tool_call>
{\"name\": \"act\", \"arguments\": {\"command\": \"<action>\"}}
</tool_call>
The game tells you what happens and lists the valid actions: choose one of them.
Put each object where it usually belongs. The game ends when the task is complete.
";

/// The wiki agent's system prompt, code-as-action; the functions follow it.
const WIKI_CODE_PROMPT: &str = "You answer questions about an encyclopedia by writing Python code. Never guess: look the answer up.
Write one code block per turn:
```python
<code>
```
It runs in a notebook where these functions are defined; print what you want to read:
";

impl Task {
    /// Is it the calculator (the default, left out of `settings.json`)?
    pub fn is_calculator(&self) -> bool {
        *self == Self::Calculator
    }

    /// The `agentfly` subcommand that runs it.
    pub fn command(self) -> &'static str {
        match self {
            Self::Calculator => "calculator",
            Self::WikiQa(_) => "wiki-qa",
            Self::TextWorld => "textworld",
        }
    }

    /// Its name in reports and directories.
    pub fn name(self) -> String {
        match self {
            Self::Calculator | Self::TextWorld => self.command().into(),
            Self::WikiQa(format) => format!("{} ({})", self.command(), format.name()),
        }
    }

    /// The tools the agent has.
    pub fn tools(self) -> Vec<String> {
        let names: &[&str] = match self {
            Self::Calculator => &["calculator", "submit_answer"],
            Self::WikiQa(CallFormat::Hermes) => &["search", "retrieve", "submit_answer"],
            Self::WikiQa(CallFormat::Code) => {
                &["code_interpreter", "search", "retrieve", "submit_answer"]
            }
            Self::TextWorld => &["act"],
        };
        names.iter().map(|n| n.to_string()).collect()
    }

    /// The files its tools read, for the trainer's `[agent] resources`: for the wiki, the
    /// corpus, as an absolute path (a run's configuration works from any directory).
    pub fn resources(self) -> std::collections::BTreeMap<String, PathBuf> {
        let mut resources = std::collections::BTreeMap::new();
        if let Self::WikiQa(_) = self {
            let corpus = corpus_path();
            let corpus = std::path::absolute(&corpus).unwrap_or(corpus);
            resources.insert(agentfly_tools::wiki::CORPUS_RESOURCE.to_string(), corpus);
        }
        resources
    }

    /// The reward that scores a chain.
    pub fn reward(self) -> &'static str {
        match self {
            Self::Calculator => "exact_numeric",
            Self::WikiQa(_) => "squad_exact_match",
            Self::TextWorld => "world_success",
        }
    }

    /// The call format.
    pub fn format(self) -> &'static str {
        match self {
            Self::Calculator | Self::TextWorld => "hermes",
            Self::WikiQa(format) => format.name(),
        }
    }

    /// The chain budgets.
    pub fn chain(self) -> ChainConfig {
        let (max_turns, max_tokens_per_turn) = match self {
            Self::Calculator => (3, 64),
            Self::WikiQa(_) => (4, 64),
            // The game's own step limit ends it first; every turn is one short action.
            Self::TextWorld => (crate::textworld::games::STEP_LIMIT + 1, 40),
        };
        ChainConfig {
            max_turns,
            max_tokens_per_turn,
            temperature: 1.0,
            ..ChainConfig::default()
        }
    }

    /// The rollout's defaults: a code-acting chain holds its sandbox for its whole life,
    /// and a playing chain its game server (a JVM, ~90 MB), so there is one per chain
    /// running at once.
    pub fn rollout(self) -> RolloutSection {
        match self {
            Self::WikiQa(CallFormat::Code) => RolloutSection {
                env_capacity: 32,
                concurrency: 32,
                ..RolloutSection::default()
            },
            Self::TextWorld => RolloutSection {
                env_capacity: 16,
                concurrency: 16,
                ..RolloutSection::default()
            },
            _ => RolloutSection::default(),
        }
    }

    /// The system prompt describing the tools.
    pub fn tool_prompt(self) -> String {
        match self {
            Self::Calculator => CALCULATOR_PROMPT.into(),
            Self::TextWorld => TEXTWORLD_PROMPT.into(),
            Self::WikiQa(CallFormat::Hermes) => WIKI_HERMES_PROMPT.into(),
            Self::WikiQa(CallFormat::Code) => {
                let toolbox =
                    agentfly_core::Toolbox::from_names(&["search", "retrieve", "submit_answer"])
                        .expect("the wiki tools are linked");
                format!(
                    "{WIKI_CODE_PROMPT}{}",
                    agentfly_envs::python::tools::python_stubs(toolbox.tools())
                )
            }
        }
    }

    /// The system prompt of the no-tool baseline.
    pub fn no_tool_prompt(self) -> &'static str {
        match self {
            Self::Calculator => {
                "You are a careful assistant that solves arithmetic problems. End your reply with the final answer as a number."
            }
            Self::WikiQa(_) => {
                "You answer questions from memory. Reply with the answer alone: a year, or an article's title."
            }
            Self::TextWorld => "You play a text game.",
        }
    }

    /// Is there a closed-book baseline (the model without tools)? Not for a game, which
    /// is played only by acting in it.
    pub fn has_closed_book(self) -> bool {
        !matches!(self, Self::TextWorld)
    }

    /// What the demonstrations show, for the report.
    pub fn demos_description(self) -> &'static str {
        match self {
            Self::Calculator => "\"What is a + b?\" demonstrations",
            Self::WikiQa(_) => {
                "demonstrations of the named-article year form (retrieve, then submit)"
            }
            Self::TextWorld => "gold action sequences of training-fold games",
        }
    }

    /// What a question is called in the report.
    pub fn items(self) -> &'static str {
        match self {
            Self::Calculator => "problems",
            Self::WikiQa(_) => "questions",
            Self::TextWorld => "games",
        }
    }

    /// Gets the process ready for the task's tools: for the wiki, the corpus fetched when
    /// absent and its index opened (built once, cached beside it) and installed.
    pub fn prepare_process(self) -> Result<(), JobError> {
        if let Self::WikiQa(_) = self {
            if agentfly_tools::wiki::installed().is_some() {
                return Ok(());
            }
            let corpus = corpus_path();
            if std::env::var_os("AGENTFLY_WIKI_CORPUS").is_some() {
                // The user's own corpus: used as it is, never fetched over nor checked
                // against the package's digest.
                if !corpus.is_file() {
                    return Err(JobError::State(format!(
                        "AGENTFLY_WIKI_CORPUS names {}, which is missing",
                        corpus.display()
                    )));
                }
            } else {
                CORPUS_FILE.fetch(&corpus)?;
            }
            let index = agentfly_tools::wiki::open_cached(&corpus)
                .map_err(|e| JobError::State(e.to_string()))?;
            agentfly_tools::wiki::install(index);
        }
        Ok(())
    }

    /// Writes the splits of `seed` with `sizes` into `dir` when they are not all there (the
    /// wiki's asking `questions`), then reads them back and checks them disjoint (by
    /// question; for the wiki also by source article).
    pub fn write_data(
        self,
        seed: u64,
        sizes: SplitSizes,
        questions: Questions,
        dir: &Path,
    ) -> Result<(), JobError> {
        let file = |name: &str| dir.join(format!("{name}.jsonl"));
        if SPLIT_NAMES.iter().any(|s| !file(s).exists()) {
            let state = |e: &dyn std::fmt::Display| JobError::State(e.to_string());
            match self {
                Self::Calculator => {
                    arithmetic::splits(seed, sizes)
                        .map_err(|e| state(&e))?
                        .write(dir)?;
                }
                Self::WikiQa(format) => {
                    // The corpus the installed index already holds.
                    self.prepare_process()?;
                    let index = agentfly_tools::wiki::installed().expect("installed just above");
                    let demo_format = match format {
                        CallFormat::Hermes => DemoFormat::Hermes,
                        CallFormat::Code => DemoFormat::Code,
                    };
                    wiki_qa::splits_with(&index, seed, sizes, questions)
                        .map_err(|e| state(&e))?
                        .write(dir, &index, demo_format)?;
                }
                Self::TextWorld => crate::textworld::games::write_splits(seed, sizes, dir)?,
            }
        }
        let data: Vec<(&str, Vec<Sample>)> = SPLIT_NAMES
            .iter()
            .map(|s| Ok((*s, read_samples(file(s))?)))
            .collect::<Result<_, JobError>>()?;
        let named: Vec<(&str, &[Sample])> = data.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        check_disjoint(&named).map_err(|o| JobError::Overlap {
            dir: dir.to_path_buf(),
            overlap: format!(
                "{} sample `{}` and {} sample `{}` ask the same question ({:?})",
                o.first, o.first_id, o.second, o.second_id, o.question
            ),
        })?;
        if let Self::WikiQa(_) = self {
            // Held-out articles are never trained on: not in train, not in the demos.
            for pair in [[0, 2], [0, 1], [1, 2], [3, 2], [3, 1]] {
                check_articles_disjoint(&[named[pair[0]], named[pair[1]]]).map_err(|e| {
                    JobError::Overlap {
                        dir: dir.to_path_buf(),
                        overlap: e.to_string(),
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// The corpus file (`AGENTFLY_WIKI_CORPUS` names another copy).
pub fn corpus_path() -> PathBuf {
    std::env::var_os("AGENTFLY_WIKI_CORPUS")
        .map_or_else(|| PathBuf::from(DEFAULT_CORPUS), PathBuf::from)
}
