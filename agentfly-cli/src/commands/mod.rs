//! One file per subcommand.

pub mod call;
pub mod export_gguf;
pub mod fetch_corpus;
pub mod fetch_model;
pub mod generate;
pub mod logits;
mod mcp;
pub mod mcp_serve;
mod model_args;
pub mod new;
pub mod render;
pub mod rewards;
pub mod rollout;
pub mod serve;
pub mod tasks;
pub mod tools;
pub mod train;

use std::io::Write;

/// Waits for SIGINT (Ctrl-C) or SIGTERM: how a serving command is asked to stop.
pub(crate) async fn until_stopped() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut interrupt, mut terminate) = (
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
    );
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}

/// Writes `text` to stdout. A reader that stopped early (`agentfly tools | head`) closed
/// the pipe: that ends the listing, it is not an error.
pub(crate) fn print_listing(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
