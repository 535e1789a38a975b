//! Reading a child process's newline-delimited JSON messages, shared by the Python sandbox
//! and the remote-environment bridge: every read is bounded in size (a line without end
//! must not take the host's memory), and a closed pipe is told apart from an oversized
//! message; a gone child's exit status is collected without waiting long.

use serde_json::Value;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};
use tokio::process::Child;

/// What one bounded read gave.
pub(crate) enum Line {
    /// A whole line, its newline included.
    Message(Vec<u8>),
    /// The pipe closed before a whole line came.
    Closed,
    /// `max_bytes` came without a newline.
    TooLong,
}

/// Reads one line of at most `max_bytes` from `reader`.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max_bytes: u64,
) -> std::io::Result<Line> {
    let mut line = Vec::new();
    reader.take(max_bytes).read_until(b'\n', &mut line).await?;
    Ok(if line.last() == Some(&b'\n') {
        Line::Message(line)
    } else if line.len() as u64 >= max_bytes {
        Line::TooLong
    } else {
        Line::Closed
    })
}

/// `line` as JSON, or what is wrong with it (the parser's error and the line's start).
pub(crate) fn parse(line: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(line).map_err(|e| {
        let shown: String = String::from_utf8_lossy(line).chars().take(200).collect();
        format!("{e}: {shown:?}")
    })
}

/// The exit status of a child that closed its output, if it is reaped within half a
/// second (a child that closed its output but lives on gives `None`).
pub(crate) async fn exit_status(child: &mut Child) -> Option<ExitStatus> {
    tokio::time::timeout(Duration::from_millis(500), child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}
