//! The text-world job's games: the server that plays them and the splits and
//! demonstrations written from them. Knows nothing of the pipeline, which uses it.

use crate::JobError;
use agentfly_core::data::write_jsonl;
use agentfly_core::{CallContext, Sample, Toolbox};
use agentfly_envs::{RemoteConfig, RemoteEnv};
use agentfly_tools::tasks::arithmetic::SplitSizes;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The game: TextWorld-Commonsense in one room with two objects to put away.
pub const GAME: &str = "twc";
/// Its generation settings.
pub const GAME_PARAMS: &str =
    "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0";
/// The world's own step limit: a game ends (truncated) after this many actions.
pub const STEP_LIMIT: usize = 8;
/// The action that describes the room again, as the first observation did.
const LOOK: &str = "look around";
/// How many games each fold offers.
const FOLD_GAMES: usize = 1000;

/// The Python that serves the games: `AGENTFLY_WORLDS_PYTHON`, else `.venv-worlds`.
pub fn worlds_python() -> Result<PathBuf, JobError> {
    let path = std::env::var_os("AGENTFLY_WORLDS_PYTHON")
        .map_or_else(|| PathBuf::from(".venv-worlds/bin/python"), PathBuf::from);
    if !path.exists() {
        return Err(JobError::State(format!(
            "{} is missing: run `scripts/setup` (it installs textworld-express from PyPI into \
             .venv-worlds), or set AGENTFLY_WORLDS_PYTHON",
            path.display()
        )));
    }
    std::path::absolute(&path).map_err(JobError::io(&path))
}

/// The game server's configuration.
pub fn world() -> Result<RemoteConfig, JobError> {
    Ok(world_with(worlds_python()?))
}

/// The game server's configuration, served by `python`.
pub fn world_with(python: PathBuf) -> RemoteConfig {
    RemoteConfig {
        start_timeout: Duration::from_secs(120),
        ..RemoteConfig::world(
            python,
            "textworld_express",
            json!({
                "game": GAME,
                "params": GAME_PARAMS,
                "step_limit": STEP_LIMIT,
                "show_valid_actions": true,
            }),
        )
    }
}

/// Writes the splits into `dir`: test games from the test fold, validation games from the
/// dev fold, training games and demonstrations from the train fold, each game's first
/// observation its question. A game whose first observation another split already has is
/// skipped, so no held-out game is seen in training. Demonstrations replay the game's gold
/// action sequence through the `act` tool, so they read exactly as rollouts do.
pub fn write_splits(seed: u64, sizes: SplitSizes, dir: &Path) -> Result<(), JobError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(JobError::io(Path::new("<tokio runtime>")))?;
    let world = world()?;
    let splits = runtime.block_on(async move {
        let state = |e: &dyn std::fmt::Display| JobError::State(e.to_string());
        let mut env = RemoteEnv::start(world).await.map_err(|e| state(&e))?;
        let mut seen = HashSet::new();
        let order = |fold: &str| {
            let mut indices: Vec<usize> = (0..FOLD_GAMES).collect();
            let salt = match fold {
                "train" => 0,
                "dev" => 1,
                _ => 2,
            };
            indices.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed * 3 + salt));
            indices.into_iter()
        };
        let mut test_order = order("test");
        let test = games(&mut env, "test", &mut test_order, sizes.test, &mut seen).await?;
        let mut dev_order = order("dev");
        let val = games(&mut env, "dev", &mut dev_order, sizes.val, &mut seen).await?;
        let mut train_order = order("train");
        let train = games(&mut env, "train", &mut train_order, sizes.train, &mut seen).await?;
        let demo_games = games(&mut env, "train", &mut train_order, sizes.demos, &mut seen).await?;
        // The demonstrations play through a chain's context, as rollouts do.
        let mut ctx = CallContext::new();
        ctx.insert_env(env);
        let toolbox = Toolbox::from_names(&["act"]).map_err(|e| state(&e))?;
        let mut demos = Vec::with_capacity(demo_games.len());
        for game in &demo_games {
            demos.push(demonstration(&toolbox, &mut ctx, game).await?);
        }
        Ok::<_, JobError>([
            ("train", train),
            ("val", val),
            ("test", test),
            ("demos", demos),
        ])
    })?;
    std::fs::create_dir_all(dir).map_err(JobError::io(dir))?;
    for (name, samples) in splits {
        write_jsonl(dir.join(format!("{name}.jsonl")), &samples)?;
    }
    Ok(())
}

/// `count` games of `fold` in `order`, each a sample whose question is its first
/// observation, skipping games whose first observation is already `seen`.
async fn games(
    env: &mut RemoteEnv,
    fold: &str,
    order: &mut impl Iterator<Item = usize>,
    count: usize,
    seen: &mut HashSet<String>,
) -> Result<Vec<Sample>, JobError> {
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let Some(index) = order.next() else {
            return Err(JobError::State(format!(
                "the {fold} fold has fewer than {count} distinct games"
            )));
        };
        let fields = json!({"fold": fold, "index": index});
        let first = env
            .begin(None, Some(&Sample::new("probe", fields.clone())))
            .await
            .map_err(|e| JobError::State(e.to_string()))?;
        if !seen.insert(first.observation.clone()) {
            continue;
        }
        let mut fields = fields;
        fields["question"] = Value::String(first.observation);
        fields["seed"] = first.info["seed"].clone();
        fields["game"] = json!(GAME);
        out.push(Sample::new(format!("{fold}-{index}"), fields));
    }
    Ok(out)
}

/// The game `sample` played by its gold action sequence through the `act` tool of
/// `toolbox` on the world in `ctx`: the conversation as a chain would have it, without
/// the path's opening `look around`.
async fn demonstration(
    toolbox: &Toolbox,
    ctx: &mut CallContext,
    sample: &Sample,
) -> Result<Sample, JobError> {
    let state = |e: &dyn std::fmt::Display| JobError::State(e.to_string());
    let mut fields = sample.fields.clone();
    fields.insert("gold".into(), json!(true));
    let mut world = ctx.take_env::<RemoteEnv>().await.map_err(|e| state(&e))?;
    let first = world
        .get_mut()
        .begin(None, Some(&Sample::new(&sample.id, Value::Object(fields))))
        .await;
    ctx.put_env(world);
    let first = first.map_err(|e| state(&e))?;
    let mut gold: Vec<String> =
        serde_json::from_value(first.info["gold_actions"].clone()).map_err(|e| state(&e))?;
    // The games' gold paths open with `look around`, which repeats the first observation
    // (the question) and spends one of the game's few steps: a policy taught it wastes that
    // step in every game, and many games end at the limit (RESULTS.md, run 3).
    if gold.first().is_some_and(|a| a == LOOK) {
        gold.remove(0);
    }
    let mut messages = vec![json!({"role": "user", "content": first.observation})];
    let mut ended = false;
    for action in &gold {
        let arguments = json!({"command": action});
        let observation = toolbox.call(ctx, "act", arguments.clone()).await;
        if observation.is_error {
            return Err(state(&format!(
                "{}: the gold action {action:?} failed: {}",
                sample.id, observation.text
            )));
        }
        let call = json!({"name": "act", "arguments": arguments});
        messages.push(
            json!({"role": "assistant", "content": format!("<tool_call>\n{call}\n</tool_call>")}),
        );
        ended = observation.terminal;
        if ended {
            break;
        }
        messages.push(json!({"role": "tool", "name": "act", "content": observation.text}));
    }
    if !ended {
        return Err(state(&format!(
            "{}: the gold path did not end the game",
            sample.id
        )));
    }
    Ok(Sample::new(
        format!("demo-{}", sample.id),
        json!({"messages": messages, "seed": sample.fields["seed"], "fold": sample.fields["fold"]}),
    ))
}
