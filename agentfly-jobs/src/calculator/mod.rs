//! The calculator job (`agentfly calculator`): SmolLM2-135M-Instruct learns to use a
//! calculator. Evaluate the initial policy on held-out problems (with and without tools), a
//! narrow SFT warm start, evaluate, RL on the wide training mix, evaluate, and a Markdown +
//! PNG report; `agentfly calculator ablate` runs the ablations.
//!
//! | module | what lives there |
//! |---|---|
//! | [`options`] | the command-line options and the algorithms |
//! | [`ablate`] | the ablations |
//!
//! The run itself — settings, data, stages, report — is [`crate::job`], shared with the
//! wiki-qa job.

pub mod ablate;
pub mod options;

pub use crate::job::{Job, Settings, pipeline};
pub use options::{Action, Algorithm, Args, RunArgs};

use crate::JobError;

/// Runs the job, or the ablations.
pub fn run(args: &Args) -> Result<(), JobError> {
    match &args.action {
        Some(Action::Ablate(ablate)) => ablate::run(ablate),
        None => pipeline::run(&Job::prepare(&args.run)?),
    }
}
