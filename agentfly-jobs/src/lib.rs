//! agentfly's end-to-end jobs. A job is a pipeline of stages over a run directory —
//! data → evaluate → SFT → evaluate → RL → evaluate → report — where every stage writes its
//! result when it finishes and is skipped when the result is there, so a rerun of the same
//! command continues where an interrupted one stopped.
//!
//! | module | what lives there |
//! |---|---|
//! | [`run_dir`] | a job's directory: its settings (a rerun with others is refused), the command that started it, files written whole, stages cached as they finish |
//! | [`evaluation`] | greedy held-out evaluations with progress bars; validation points during RL |
//! | [`report`] | the report every job writes: accuracy tables with 95% intervals and verdicts, plotters charts, training curves, sample trajectories, times |
//! | [`job`] | one run of a job: settings and presets, data checked disjoint, the stages, the report; per task ([`job::Task`]) |
//! | [`calculator`] | the calculator agent (SmolLM2 learns to use a calculator) and its ablations |
//! | [`wiki_qa`] | the wiki agents (search and retrieve, as JSON calls and as code) |

#![warn(missing_docs)]

pub mod calculator;
pub mod error;
pub mod evaluation;
pub mod job;
pub mod report;
pub mod run_dir;
pub mod textworld;
pub mod wiki_qa;

pub use error::JobError;
pub use run_dir::RunDir;
