//! `agentfly serve --model M`: the model behind an OpenAI-compatible endpoint (chat
//! completions with tools and streaming), every `/sessions/{ID}/v1` client recorded as
//! trajectories. Runs until SIGINT or SIGTERM.

use super::model_args::ModelArgs;
use agentfly_engine::engine::{Engine, EngineConfig};
use agentfly_serve::{ChatModel, ServeConfig, Server};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Options of `agentfly serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// The port (0 picks a free one; the URL goes to stderr).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model's name in `/v1/models` (default: the model path's last component).
    #[arg(long)]
    name: Option<String>,
    /// Require `Authorization: Bearer KEY` (default: the AGENTFLY_API_KEY variable, if set;
    /// else no key).
    #[arg(long)]
    api_key: Option<String>,
    /// The most sessions kept at once.
    #[arg(long, default_value_t = 1024)]
    max_sessions: usize,
    /// Seconds a session may stay unused before it is forgotten.
    #[arg(long, default_value_t = 900)]
    session_idle_secs: u64,
    /// The most generations at once (the engine batches them).
    #[arg(long, default_value_t = 64)]
    max_concurrent: usize,
    /// Seconds a request may wait for a generation slot before a 503.
    #[arg(long, default_value_t = 600)]
    queue_wait_secs: u64,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_request_bytes: usize,
    /// Do not describe the tools in the system message when the chat template has no tool
    /// syntax (the client's system prompt describes them).
    #[arg(long)]
    no_tool_prompt: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let pretrained = args.model.load()?;
    let (tokenizer, template, eos) = pretrained.chat_parts()?;
    let name = args.name.clone().unwrap_or_else(|| {
        let path = &args.model.model;
        path.file_stem()
            .or(path.file_name())
            .map_or_else(|| "agentfly".into(), |n| n.to_string_lossy().into_owned())
    });
    let context = pretrained.config.max_position_embeddings;
    let model = ChatModel::new(name.clone(), tokenizer, template, eos, context)?
        .describe_tools(!args.no_tool_prompt);
    let config = ServeConfig {
        max_request_bytes: args.max_request_bytes,
        max_sessions: args.max_sessions,
        session_idle: Duration::from_secs(args.session_idle_secs),
        queue_wait: Duration::from_secs(args.queue_wait_secs),
        max_concurrent: args.max_concurrent,
        api_key: args
            .api_key
            .clone()
            .or_else(|| std::env::var("AGENTFLY_API_KEY").ok()),
        ..ServeConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let engine = Engine::start(pretrained, EngineConfig::default());
        let addr = std::net::SocketAddr::new(args.host, args.port);
        let server = Server::start(model, Arc::new(engine), config, addr).await?;
        eprintln!(
            "agentfly serve: {name} at {} (record a session at {})",
            server.base_url(),
            server.session_url("ID")
        );
        super::until_stopped().await?;
        eprintln!("agentfly serve: stopping");
        server.shutdown().await?;
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(Duration::from_secs(5));
    Ok(ExitCode::SUCCESS)
}
