//! Tools and a reward for interactive text worlds hosted through [`RemoteEnv`]
//! (TextWorldExpress, ScienceWorld, or any server speaking the remote protocol): the chain
//! leases one world instance and its episode runs across the chain's turns.
//!
//! - [`act`]: one action in the world; the chain ends when the episode does.
//! - [`look`], [`inventory`]: the usual `look around` and `inventory` actions.
//! - [`valid_actions`]: the actions the world lists now (no step taken).
//! - [`world_score`] (reward): the world's own score, success beside it as `correct`.
//! - [`world_success`] (reward): 1 when the world says the task was achieved; the world's
//!   own score, the reward it summed and the steps taken are reported beside it.
//!
//! A world that crashes or stops answering ends the chain with
//! [`ChainEnd::Error`](agentfly_core::rollout::ChainEnd) (the episode's state is gone); an action
//! the world rejects is an error the model reads, and the episode goes on.

use agentfly_core::{Observation, RewardOutput, ToolErrorKind, reward, tool};
use agentfly_envs::{RemoteEnv, RemoteError, StepResult};

/// What the model reads after a step: the world's text, then how the episode ended.
fn render(result: &StepResult) -> Observation {
    let mut text = result.observation.trim_end().to_string();
    if result.done {
        let verdict = match result.success {
            Some(true) => "The task is complete.",
            Some(false) => "The episode is over: the task failed.",
            None => "The episode is over.",
        };
        text.push_str("\n\n");
        text.push_str(verdict);
        if let Some(score) = result.score {
            text.push_str(&format!(" Score: {score}."));
        }
    }
    let mut observation = Observation::text(text);
    observation.terminal = result.done;
    observation
}

fn failure(error: RemoteError) -> Observation {
    if error.is_fatal() {
        Observation::error(
            ToolErrorKind::EnvironmentLost,
            format!("Error: the world is gone, so the episode cannot go on ({error})"),
        )
    } else {
        let message = match error {
            RemoteError::Server { message, .. } => message,
            other => other.to_string(),
        };
        Observation::error(ToolErrorKind::ToolError, format!("Error: {message}"))
    }
}

async fn step(world: &mut RemoteEnv, action: &str) -> Observation {
    match world.step(action).await {
        Ok(result) => render(&result),
        Err(e) => failure(e),
    }
}

/// Takes one action in the text world, written as you would type it in the game (e.g.
/// "open fridge", "take apple from table", "go north"), and shows what happens.
#[tool(env = RemoteEnv, timeout_ms = 60000)]
pub async fn act(
    world: &mut RemoteEnv,
    /// The action, in the game's own words.
    command: String,
) -> Observation {
    step(world, command.trim()).await
}

/// Looks around: describes the current room and what is in it.
#[tool(env = RemoteEnv, timeout_ms = 60000)]
pub async fn look(world: &mut RemoteEnv) -> Observation {
    step(world, "look around").await
}

/// Lists what you are carrying.
#[tool(env = RemoteEnv, timeout_ms = 60000)]
pub async fn inventory(world: &mut RemoteEnv) -> Observation {
    step(world, "inventory").await
}

/// Lists the actions the game accepts right now (takes no step).
#[tool(env = RemoteEnv, timeout_ms = 60000)]
pub async fn valid_actions(world: &mut RemoteEnv) -> Observation {
    if let Some(why) = world.lost() {
        return failure(RemoteError::Lost(why.to_string()));
    }
    match world
        .episode()
        .last
        .as_ref()
        .and_then(|l| l.valid_actions.as_ref())
    {
        Some(actions) if !actions.is_empty() => Observation::text(actions.join("\n")),
        Some(_) => Observation::text("(no actions are listed now)"),
        None => Observation::error(
            ToolErrorKind::ToolError,
            "Error: this world does not list its actions",
        ),
    }
}

/// 1 when the world says the chain's episode achieved its task, else 0; the world's own
/// score (`score`), the summed step rewards (`env_reward`) and the steps taken (`steps`)
/// are reported beside it, never mixed into it.
#[reward(env = RemoteEnv)]
pub async fn world_success(world: &mut RemoteEnv) -> RewardOutput {
    let episode = world.episode();
    let success = f32::from(u8::from(episode.success == Some(true)));
    let mut out = RewardOutput::new(success)
        .with_metric("success", f64::from(success))
        .with_metric("correct", f64::from(success))
        .with_metric("steps", episode.steps as f64)
        .with_metric("env_reward", episode.total_reward);
    if let Some(score) = episode.score {
        out = out.with_metric("score", score);
    }
    out
}

/// The world's own score of the chain's episode (the share of the task done, clamped to
/// 0..1; 0 when the world keeps none): a denser reward than [`world_success`] for tasks
/// that a policy seldom completes, as the seed paper's ScienceWorld runs used. Success is
/// reported beside it as `correct`, so accuracy stays task success.
#[reward(env = RemoteEnv)]
pub async fn world_score(world: &mut RemoteEnv) -> RewardOutput {
    let episode = world.episode();
    let success = f64::from(u8::from(episode.success == Some(true)));
    let score = episode.score.unwrap_or(0.0);
    let reward = if score.is_finite() {
        score.clamp(0.0, 1.0)
    } else {
        0.0
    };
    RewardOutput::new(reward as f32)
        .with_metric("success", success)
        .with_metric("correct", success)
        .with_metric("score", score)
        .with_metric("steps", episode.steps as f64)
        .with_metric("env_reward", episode.total_reward)
}
