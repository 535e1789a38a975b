//! `agentfly rollout`: n chains per sample of a JSONL dataset with the model, the tools and
//! a reward; one JSON line per trajectory, and a summary.

use super::model_args::ModelArgs;
use agentfly_core::env::{EnvPool, EnvPools, PoolConfig};
use agentfly_core::rollout::format::format_by_name;
use agentfly_core::rollout::{ChainConfig, ChainSetup, Policy, Rollout};
use agentfly_core::{Rewards, Toolbox, data};
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_engine::server::{ServerApi, ServerConfig, ServerPolicy};
use agentfly_envs::{RemoteConfig, RemoteEnv};
use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `agentfly rollout`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The samples: one JSON object per line with an `id` and a `question`, `prompt` or
    /// `messages` field (and whatever the reward reads, e.g. `answer`).
    #[arg(long)]
    data: PathBuf,
    /// The tools the model may call, comma-separated (see `agentfly tools`).
    #[arg(long, value_delimiter = ',', required_unless_present = "mcp")]
    tools: Vec<String>,
    /// An MCP server whose tools the model may call too, started as a child process and
    /// spoken to over stdio, one session per chain (repeatable).
    #[arg(long, value_name = "COMMAND ARGS")]
    mcp: Vec<String>,
    /// The reward that scores each trajectory (see `agentfly rewards`).
    #[arg(long)]
    reward: Option<String>,
    /// How the model writes tool calls: hermes, react or code.
    #[arg(long, default_value = "hermes")]
    format: String,
    /// Chains per sample.
    #[arg(long, default_value_t = 1)]
    chains: usize,
    /// The most model turns per chain.
    #[arg(long, default_value_t = 4)]
    max_turns: usize,
    /// The most tokens one turn may generate.
    #[arg(long, default_value_t = 256)]
    max_tokens_per_turn: usize,
    /// The most tokens of a trajectory, prompt included.
    #[arg(long, default_value_t = 2048)]
    max_total_tokens: usize,
    /// A system message before each sample's messages.
    #[arg(long, conflicts_with = "system_prompt_file")]
    system_prompt: Option<String>,
    /// A file holding the system message.
    #[arg(long)]
    system_prompt_file: Option<PathBuf>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 1.0)]
    temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// The run's seed (chain c of sample i samples with a seed derived from it).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The most chains running at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The most sequences the engine decodes at once.
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// The most instances of each environment (e.g. Python sandboxes).
    #[arg(long, default_value_t = 8)]
    env_capacity: usize,
    /// A ready text world for the world tools (`act`, `look`, `inventory`,
    /// `valid_actions`): `textworld_express` or `scienceworld`, one server per chain
    /// running at once (see docs/REMOTE-ENVS.md).
    #[arg(long, conflicts_with = "remote_url")]
    world: Option<String>,
    /// The world's settings as JSON, e.g. `{"task": "boil"}` for ScienceWorld or
    /// `{"game": "coin"}` for TextWorldExpress.
    #[arg(long, default_value = "{}")]
    world_config: String,
    /// The Python that serves the world (with its PyPI package).
    #[arg(long, default_value = ".venv-worlds/bin/python")]
    world_python: PathBuf,
    /// Or a running remote-environment server (HTTP), e.g. `http://127.0.0.1:8000`.
    #[arg(long)]
    remote_url: Option<String>,
    /// Generate on inference servers instead of the built-in engine: their base URLs,
    /// comma-separated, used in turn. `--model` still gives the tokenizer and chat
    /// template: the model the servers serve (for llama.cpp see `agentfly export-gguf`).
    #[arg(long, value_delimiter = ',')]
    server: Vec<String>,
    /// The servers' API: `llama.cpp` (`/completion`), `vllm` (`/v1/completions`; run it
    /// with `--logprobs-mode processed_logprobs`) or `sglang` (`/generate`).
    #[arg(long, default_value = "llama.cpp", requires = "server")]
    server_api: ServerApi,
    /// The served model's name, sent to vLLM (default: the server's only model).
    #[arg(long, requires = "server")]
    server_model: Option<String>,
    /// Only the first N samples.
    #[arg(long)]
    limit: Option<usize>,
    /// Where to write the trajectories (JSON Lines).
    #[arg(long)]
    out: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// What generates: the built-in engine, or inference servers.
enum Generator {
    Engine(Engine),
    Servers(ServerPolicy),
}

/// The remote world the options name, if any.
fn remote_config(args: &Args) -> anyhow::Result<Option<RemoteConfig>> {
    let config: serde_json::Value = serde_json::from_str(&args.world_config)
        .with_context(|| format!("--world-config is not JSON: {}", args.world_config))?;
    if let Some(url) = &args.remote_url {
        return Ok(Some(RemoteConfig {
            url: Some(url.clone()),
            config,
            ..RemoteConfig::default()
        }));
    }
    let Some(world) = &args.world else {
        return Ok(None);
    };
    if !["textworld_express", "scienceworld"].contains(&world.as_str()) {
        bail!("unknown --world `{world}` (textworld_express or scienceworld)");
    }
    if !args.world_python.exists() {
        bail!(
            "--world-python {} is missing: `scripts/setup` makes .venv-worlds with the worlds",
            args.world_python.display()
        );
    }
    let python = std::path::absolute(&args.world_python)?;
    Ok(Some(RemoteConfig {
        start_timeout: std::time::Duration::from_secs(120),
        ..RemoteConfig::world(python, world, config)
    }))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.chains == 0 {
        bail!("--chains must be at least 1");
    }
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        bail!("--temperature must be 0 (greedy) or a positive number");
    }
    if !(args.top_p > 0.0 && args.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    let format = format_by_name(&args.format)
        .with_context(|| format!("unknown --format `{}` (hermes, react or code)", args.format))?;
    let toolbox = Toolbox::from_names(&args.tools)?;
    let isolation =
        agentfly_tools::sandbox::check(&toolbox, agentfly_tools::sandbox::Purpose::Evaluate, true)
            .map_err(anyhow::Error::msg)?;
    let world = remote_config(&args)?;
    let needs = agentfly_tools::prepare::Needs {
        resources: None,
        default_corpus: Some(agentfly_envs::wiki::DEFAULT_CORPUS.into()),
        world: world.is_some(),
    };
    agentfly_tools::prepare::prepare(&toolbox, &needs).map_err(anyhow::Error::msg)?;
    let rewards = match &args.reward {
        Some(name) => Some(Rewards::from_names(std::slice::from_ref(name))?),
        None => None,
    };
    let mut samples = data::read_jsonl(&args.data)?;
    if let Some(limit) = args.limit {
        samples.truncate(limit);
    }
    if samples.is_empty() {
        bail!("{} holds no samples", args.data.display());
    }
    let system_prompt = match (&args.system_prompt, &args.system_prompt_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, None) => String::new(),
    };

    let pool = PoolConfig {
        capacity: args.env_capacity.max(1),
        ..PoolConfig::default()
    };
    let pools = EnvPools::new(pool.clone());
    let runtime = super::mcp::runtime()?;
    // MCP servers' tools join the named ones (their sessions live on this runtime).
    let mcp = runtime.block_on(super::mcp::start(&args.mcp))?;
    let toolbox = mcp.extend(toolbox)?;
    if let Some(remote) = world {
        let place = remote
            .url
            .clone()
            .unwrap_or_else(|| remote.command.join(" "));
        let world = EnvPool::<RemoteEnv>::new(remote, pool);
        // One instance now (the pool keeps it for the first chain): a world that cannot be
        // reached, or refuses us, stops the rollout with its reason instead of ending every
        // chain with it.
        if let Err(e) = runtime.block_on(world.prewarm(1)) {
            runtime.block_on(world.close());
            bail!("the world ({place}) cannot be used: {e}");
        }
        pools.insert(world);
    }

    let model = args.model.load()?;
    let (tokenizer, template, end_of_turn) = model.chat_parts()?;
    let generator = if args.server.is_empty() {
        let config = EngineConfig {
            max_batch: args.max_batch,
            ..EngineConfig::default()
        };
        Generator::Engine(Engine::start(model, config))
    } else {
        drop(model);
        let config = ServerConfig {
            urls: args.server.clone(),
            api: args.server_api,
            model: args.server_model.clone(),
            ..ServerConfig::default()
        };
        Generator::Servers(ServerPolicy::new(config)?)
    };
    let policy: &dyn Policy = match &generator {
        Generator::Engine(engine) => engine,
        Generator::Servers(servers) => servers,
    };
    let config = ChainConfig {
        max_turns: args.max_turns,
        max_tokens_per_turn: args.max_tokens_per_turn,
        max_total_tokens: args.max_total_tokens,
        system_prompt,
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
    };
    let rollout = Rollout {
        setup: ChainSetup {
            policy,
            toolbox: &toolbox,
            format: format.as_ref(),
            template: &template,
            tokenizer: &tokenizer,
            end_of_turn: &end_of_turn,
            rewards: rewards.as_ref().zip(args.reward.as_deref()),
            config: &config,
        },
        pools: pools.clone(),
        chains: args.chains,
        concurrency: args.concurrency,
        seed: args.seed,
    };

    let total = samples.len() * args.chains;
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} trajectories, {per_sec} ({eta} left) {msg}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let (output, pool_metrics) = runtime.block_on(async {
        let mut rewarded = (0.0, 0usize);
        let output = rollout
            .run(&samples, |t| {
                if let Some(r) = t.reward {
                    rewarded.0 += f64::from(r);
                    rewarded.1 += 1;
                    bar.set_message(format!("reward {:.3}", rewarded.0 / rewarded.1 as f64));
                }
                bar.inc(1);
            })
            .await;
        let metrics = pools.metrics();
        pools.close().await;
        mcp.close().await;
        (output, metrics)
    });
    runtime.shutdown_background();
    bar.finish_and_clear();
    drop(rollout);
    let (stats, server_stats) = match generator {
        Generator::Engine(engine) => (Some(engine.stats()), None),
        Generator::Servers(servers) => (None, Some(servers.stats())),
    };

    write_trajectories(&args.out, &output.trajectories)?;
    if args.json {
        let mut summary = serde_json::to_value(&output.summary)?;
        summary["engine"] = serde_json::to_value(&stats)?;
        summary["server"] = serde_json::to_value(&server_stats)?;
        summary["sandbox_isolation"] = serde_json::to_value(isolation)?;
        summary["env_pools"] = pool_metrics
            .iter()
            .map(|(name, m)| Ok((name.to_string(), serde_json::to_value(m)?)))
            .collect::<anyhow::Result<serde_json::Map<_, _>>>()?
            .into();
        println!("{summary}");
    } else {
        println!("{}", output.summary);
        if let Some(stats) = stats {
            println!(
                "engine         {} requests, mean batch {:.1}, {} prefill passes ({} context tokens, {} reused from the prefix cache in {} hits), prefill {:.1} s, decode {:.1} s",
                stats.requests,
                stats.mean_batch(),
                stats.prefills,
                stats.prefill_tokens,
                stats.prefix_reused_tokens,
                stats.prefix_hits,
                stats.prefill_seconds,
                stats.decode_seconds
            );
        }
        if let Some(s) = server_stats {
            println!(
                "servers        {} requests, {} retries, {} failures, {} tokens, {:.1} s summed",
                s.requests, s.retries, s.failures, s.generated_tokens, s.seconds
            );
        }
        for (name, m) in &pool_metrics {
            println!(
                "env pool       {name}: {} leases, {} created, {} replaced, wait p99 {:.0} ms",
                m.leases, m.created, m.replaced, m.wait_p99_ms
            );
        }
        println!("written        {}", args.out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes one JSON line per trajectory, atomically (a temporary file renamed over `path`).
fn write_trajectories(
    path: &Path,
    trajectories: &[agentfly_core::rollout::Trajectory],
) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    {
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        for t in trajectories {
            serde_json::to_writer(&mut out, t)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    file.as_file().sync_all()?;
    file.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    agentfly_trainer::run::checkpoint::sync_dir(dir)?;
    Ok(())
}
