//! The text-world job (`agentfly textworld`): SmolLM2-135M-Instruct learns to play
//! TextWorldExpress's TextWorld-Commonsense games — put the household objects of a room
//! where they belong — by acting through the remote-environment bridge, one `act` call per
//! turn. The shared pipeline of [`crate::job`] runs it: the policy as it comes, after SFT on
//! the games' own gold action sequences, after RL; success rate on held-out games (the
//! test fold's own seeds) with 95% intervals, the world's score beside it.
//!
//! The games are served by `.venv-worlds` (made by `scripts/setup`; `AGENTFLY_WORLDS_PYTHON`
//! names another Python with `textworld-express`), one server per chain running at once.

pub mod games;

use crate::JobError;
use crate::calculator::options::RunArgs;
use crate::job::{Job, Task, pipeline};

/// Options of `agentfly textworld`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The run's options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs the pipeline (resumable).
pub fn run(args: &Args) -> Result<(), JobError> {
    let job = Job::prepare_task(Task::TextWorld, &args.run, args.run.out.clone())?;
    pipeline::run(&job)
}
