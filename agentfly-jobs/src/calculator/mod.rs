//! The calculator job (`agentfly calculator`): SmolLM2-135M-Instruct learns to use a
//! calculator. Evaluate the initial policy on held-out problems (with and without tools), a
//! narrow SFT warm start, evaluate, RL on the wide training mix, evaluate, and a Markdown +
//! PNG report; `agentfly calculator ablate` runs the ablations.
//!
//! | module | what lives there |
//! |---|---|
//! | [`options`] | the command-line options and the algorithms |
//! | [`settings`] | the settings a run is defined by, its presets, prompts and trainer configuration |
//! | [`job`] | a prepared run directory: model, data checked disjoint, configuration; what it produced |
//! | [`pipeline`] | the stages, each resumable |
//! | [`report`] | the job's report, on the shared [`crate::report`] |
//! | [`ablate`] | the ablations |

pub mod ablate;
pub mod job;
pub mod options;
pub mod pipeline;
pub mod report;
pub mod settings;

pub use job::Job;
pub use options::{Action, Algorithm, Args, RunArgs};
pub use settings::Settings;

use crate::JobError;

/// Runs the job, or the ablations.
pub fn run(args: &Args) -> Result<(), JobError> {
    match &args.action {
        Some(Action::Ablate(ablate)) => ablate::run(ablate),
        None => pipeline::run(&Job::prepare(&args.run)?),
    }
}
