//! Ready tools and rewards for agentfly agents.
//!
//! | tool | what it does |
//! |---|---|
//! | [`calculator`](calculator::calculator) | exact arithmetic: `+ - * / ^`, parentheses, unary minus, decimals, big integers |
//! | [`submit_answer`](submit::submit_answer) | terminal: the agent's final answer |
//! | [`code_interpreter`](code::code_interpreter) | Python in a persistent sandbox (stateful: a [`PythonSandbox`](agentfly_envs::PythonSandbox) per chain), with the chain's other tools callable from the code |
//! | [`search`](wiki::search) | BM25 search of a local encyclopedia (Wikipedia's vital articles): titles and snippets |
//! | [`retrieve`](wiki::retrieve) | one article's summary by title; an unknown title lists the closest |
//! | [`act`](world::act), [`look`](world::look), [`inventory`](world::inventory), [`valid_actions`](world::valid_actions) | a text world's actions (stateful: a [`RemoteEnv`](agentfly_envs::RemoteEnv) per chain, its episode across the turns); the chain ends with the episode |
//!
//! | reward | what it scores |
//! |---|---|
//! | [`exact_numeric`](rewards::exact_numeric) | 1 when the response is the sample's numeric `answer` |
//! | [`exact_match`](rewards::exact_match) | 1 when the response equals the sample's `answer` text (case and spacing ignored) |
//! | [`squad_exact_match`](rewards::squad_exact_match), [`squad_f1`](rewards::squad_f1) | SQuAD exact match / token F1 against `answer` or its `aliases` (both reported as metrics) |
//! | [`world_success`](world::world_success) | 1 when the text world says the task was achieved; its own score, summed rewards and steps as metrics |
//! | [`world_score`](world::world_score) | the text world's own score (the share of the task done); success beside it as `correct` |
//!
//! [`prepare`] makes a run's tools ready before its first chain, or stops the run with the
//! reason one cannot work at all. [`sandbox`] says what a run that executes model-written code can count on, and refuses
//! to train without network isolation unless allowed.
//!
//! [`tasks::arithmetic`] generates the calculator agent's problems (disjoint splits from a
//! seed) and its warm-start demonstrations.
//!
//! A binary sees these only if it links this crate: `agentfly_core::link!(agentfly_tools);`.

#![warn(missing_docs)]

pub mod calculator;
pub mod code;
pub mod prepare;
pub mod rewards;
pub mod sandbox;
pub mod submit;
pub mod tasks;
pub mod wiki;
pub mod world;

/// agentfly-core, re-exported so a crate depending only on this one reaches the registry.
pub use agentfly_core as core;
