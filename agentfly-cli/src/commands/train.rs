//! `agentfly train --config FILE.toml`, `agentfly eval --config FILE.toml --checkpoint DIR`
//! and `agentfly config show --config FILE.toml`.

use agentfly_core::Toolbox;
use agentfly_core::data::read_jsonl;
use agentfly_tools::prepare::{Needs, prepare};
use agentfly_tools::sandbox::{self, Purpose};
use agentfly_trainer::run::{EvalReport, Trainer, TrainerConfig};
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::ExitCode;

/// The options every command that reads a run's configuration takes.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// The run's TOML configuration (docs/configuration.md).
    #[arg(long)]
    config: PathBuf,
    /// Override a key of the configuration, as if written in it (repeatable):
    /// `--set rollout.chains=8 --set agent.format=code`. The value is TOML, or else text.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// An MCP server whose tools join the configuration's (`[[agent.mcp]]`; repeatable): a
    /// child process over stdio, e.g. `--mcp 'uvx mcp-server-git --repository DIR'`.
    #[arg(long, value_name = "COMMAND ARGS")]
    mcp: Vec<String>,
}

impl ConfigArgs {
    /// The run's configuration, overridden by `--set`, with the servers of `--mcp` added to
    /// `[[agent.mcp]]`.
    pub fn load(&self) -> anyhow::Result<TrainerConfig> {
        let mut config = TrainerConfig::load_with(&self.config, &self.sets)?;
        config.agent.mcp.extend(super::mcp::configs(&self.mcp)?);
        Ok(config)
    }
}

/// Options of `agentfly train`.
#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Train with code tools even where the sandbox cannot isolate the network.
    #[arg(long)]
    allow_network: bool,
}

/// Makes `config`'s tools ready or says why one cannot work; says what the sandbox
/// enforces when they run code, and refuses `Train` without network isolation unless
/// allowed.
fn prepare_tools(
    config: &TrainerConfig,
    purpose: Purpose,
    allow_network: bool,
) -> anyhow::Result<()> {
    let toolbox = Toolbox::from_names(&config.agent.tools)?;
    // The tools' files come from the configuration (resolved against its directory),
    // never from where the command was started.
    let needs = Needs {
        resources: Some(&config.agent.resources),
        default_corpus: None,
        world: false,
    };
    prepare(&toolbox, &needs).map_err(anyhow::Error::msg)?;
    sandbox::check(&toolbox, purpose, allow_network).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// Trains (resuming from the run's latest checkpoint when there is one).
pub fn train(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let config = args.config.load()?;
    prepare_tools(&config, Purpose::Train, args.allow_network)?;
    let mut trainer = Trainer::new(config).map_err(|e| e.in_file(&args.config.config))?;
    if trainer.step() > 0 {
        eprintln!(
            "resuming from step {} in {}",
            trainer.step(),
            trainer.config().output.dir.display()
        );
    }
    let summary = trainer.train()?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "trained {} steps (resumed from {}; {} updated, {} skipped as non-finite, {} \
             trajectories without a reward); last mean reward {}; model in {}",
            summary.steps,
            summary.resumed_from,
            summary.updated_steps,
            summary.nonfinite_skips,
            summary.reward_failures,
            summary
                .last_reward
                .map_or("-".into(), |r| format!("{r:.4}")),
            summary.model_dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `agentfly eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// The run's configuration (tools, reward, prompt, budgets, `data.eval`).
    #[command(flatten)]
    config: ConfigArgs,
    /// A checkpoint directory (or a model directory / file); default: the config's model.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Evaluate on this JSONL instead of the config's `data.eval`.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Only the first N samples.
    #[arg(long)]
    limit: Option<usize>,
    /// Write the trajectories here (JSON Lines).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Greedy accuracy of a checkpoint on held-out samples, with its 95% interval.
pub fn eval(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let config = args.config.load()?;
    let model = args
        .checkpoint
        .clone()
        .unwrap_or_else(|| config.model.path.clone());
    let data = match args.data.clone().or_else(|| config.data.eval.clone()) {
        Some(d) => d,
        None => bail!(
            "{}: no data.eval; pass --data FILE.jsonl",
            args.config.config.display()
        ),
    };
    prepare_tools(&config, Purpose::Evaluate, true)?;
    let trainer =
        Trainer::with_model(config, &model).map_err(|e| e.in_file(&args.config.config))?;
    let mut samples = read_jsonl(&data)?;
    if let Some(n) = args.limit {
        samples.truncate(n);
    }
    let report = trainer.evaluate(&samples)?;
    if let Some(out) = &args.out {
        let text: String = report
            .trajectories
            .iter()
            .map(|t| serde_json::to_string(t).map(|l| l + "\n"))
            .collect::<Result<_, _>>()?;
        std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
    }
    print_report(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &EvalReport, json: bool) -> anyhow::Result<()> {
    if json {
        // The trajectories go to `--out`, not into the summary.
        let summary = EvalReport {
            trajectories: Vec::new(),
            ..r.clone()
        };
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "accuracy       {}/{} = {:.3} (95% CI {:.3}–{:.3})",
            r.correct, r.samples, r.accuracy, r.interval.0, r.interval.1
        );
        if r.failed > 0 {
            println!(
                "failed         {} (not scored as answers; the first: {})",
                r.failed,
                r.first_failure.as_deref().unwrap_or("-")
            );
        }
        println!("reward mean    {:.4}", r.reward_mean);
        println!("tool-call rate {:.3}", r.tool_call_rate);
        println!("parse errors   {:.3} per trajectory", r.parse_error_rate);
        println!("mean turns     {:.2}", r.mean_turns);
    }
    Ok(())
}

/// `agentfly config`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the effective configuration: the file with `--set` applied and every default
    /// written out, its paths resolved.
    Show(ConfigArgs),
}

/// Prints the effective configuration as TOML.
pub fn config(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ConfigCommand::Show(args) = command;
    let config = args.load()?;
    let text = config.to_toml().map_err(anyhow::Error::msg)?;
    super::print_listing(&text)?;
    Ok(ExitCode::SUCCESS)
}
