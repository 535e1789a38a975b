//! The host's end of a sandbox's supervisor process (`supervisor.py`): starting it in
//! namespaces of its own, and its line protocol, every read bounded in size and time.

use super::process::{Isolation, Namespaces, kill_group};
use crate::lines::{self, Line};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const SUPERVISOR: &str = include_str!("supervisor.py");
const KERNEL: &str = include_str!("kernel.py");

/// The longest message the supervisor may send (a cell's capped output is far below it).
const MAX_MESSAGE_BYTES: u64 = 16 << 20;

/// How long the supervisor may take to replace a kernel (kill it, fork a fresh one).
const REPLACE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no answer came.
#[derive(Debug)]
pub(super) enum KernelError {
    /// None within the time allowed.
    NoAnswer(Duration),
    /// The kernel died mid-call; the supervisor has a fresh one ready.
    Died(String),
    /// The supervisor is gone, or answered nonsense.
    Gone(String),
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelError::NoAnswer(after) => {
                write!(f, "no answer within {:.1} s", after.as_secs_f64())
            }
            KernelError::Died(why) | KernelError::Gone(why) => f.write_str(why),
        }
    }
}

/// What the supervisor says once it is up.
#[derive(Debug, Deserialize)]
pub(super) struct Ready {
    pub(super) isolation: Isolation,
    /// The code's working directory, as the code sees it.
    pub(super) workdir: PathBuf,
}

/// What a supervisor is started with.
pub(super) struct Launch<'a> {
    pub(super) python: &'a Path,
    pub(super) namespaces: Namespaces,
    pub(super) isolate_network: bool,
    pub(super) host_workdir: &'a Path,
    pub(super) config: Value,
    pub(super) startup_timeout: Duration,
}

/// A running supervisor.
pub(super) struct Supervisor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pgid: u32,
    /// A request was sent whose answer was never read (the call was cancelled).
    pub(super) busy: bool,
}

impl Supervisor {
    /// Starts one and waits for its `ready`.
    pub(super) async fn start(launch: Launch<'_>) -> Result<(Supervisor, Ready), String> {
        let unshare = launch.namespaces.unshare_args(launch.isolate_network);
        let mut command = if unshare.is_empty() {
            Command::new(launch.python)
        } else {
            let mut c = Command::new("unshare");
            c.args(&unshare).arg("--").arg(launch.python);
            c
        };
        let mut config = launch.config;
        config["namespaces"] = json!(launch.namespaces != Namespaces::None);
        config["host_workdir"] = json!(launch.host_workdir);
        config["startup_seconds"] = json!(launch.startup_timeout.as_secs_f64());
        command
            .args(["-I", "-u", "-c", SUPERVISOR])
            .arg(config.to_string())
            .arg(KERNEL)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", launch.python.display()))?;
        let pgid = child.id().unwrap_or(0);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut stderr = child.stderr.take().expect("piped stderr");
        let mut supervisor = Supervisor {
            child,
            stdin,
            stdout,
            pgid,
            busy: false,
        };
        let first = supervisor.read_line(launch.startup_timeout).await;
        let ready = match &first {
            Ok(v) if v["ready"] == true => serde_json::from_value::<Ready>(v.clone())
                .map_err(|e| format!("its first message {v} did not parse: {e}")),
            Ok(v) => Err(format!("unexpected first message {v}")),
            Err(e) => Err(e.to_string()),
        };
        match ready {
            Ok(ready) => Ok((supervisor, ready)),
            Err(why) => {
                supervisor.kill();
                let mut text = String::new();
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text),
                )
                .await;
                Err(format!("{why}; its stderr: {}", text.trim()))
            }
        }
    }

    /// Its process id.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills it and everything it started.
    pub(super) fn kill(&mut self) {
        kill_group(self.pgid);
        let _ = self.child.start_kill();
    }

    /// Reads one message, bounded in size and time. A `died` message is the kernel's
    /// death mid-call ([`KernelError::Died`]).
    pub(super) async fn read_line(&mut self, timeout: Duration) -> Result<Value, KernelError> {
        let read = lines::read_line(&mut self.stdout, MAX_MESSAGE_BYTES);
        let message = match tokio::time::timeout(timeout, read).await {
            Err(_) => return Err(KernelError::NoAnswer(timeout)),
            Ok(Err(e)) => {
                return Err(KernelError::Gone(format!("reading its answer failed: {e}")));
            }
            Ok(Ok(Line::Closed)) => {
                return Err(KernelError::Gone(
                    match lines::exit_status(&mut self.child).await {
                        Some(status) => format!("the sandbox's supervisor exited ({status})"),
                        None => "the sandbox's supervisor closed its output".to_string(),
                    },
                ));
            }
            Ok(Ok(Line::TooLong)) => {
                return Err(KernelError::Gone(format!(
                    "it sent a message over {MAX_MESSAGE_BYTES} bytes"
                )));
            }
            Ok(Ok(Line::Message(line))) => {
                lines::parse(&line).map_err(|e| KernelError::Gone(format!("bad answer: {e}")))?
            }
        };
        let fatal = message.get("fatal") == Some(&Value::Bool(true));
        match message.get("died") {
            Some(why) => {
                self.busy = false;
                let why = why.as_str().unwrap_or("the interpreter died").to_string();
                // No fresh kernel could be started: the supervisor has ended.
                Err(match fatal {
                    true => KernelError::Gone(why),
                    false => KernelError::Died(why),
                })
            }
            None => Ok(message),
        }
    }

    /// Writes one JSON line (a request, or the answer to a cell's tool call).
    pub(super) async fn write(&mut self, message: &Value, what: &str) -> Result<(), KernelError> {
        let line = format!("{message}\n");
        if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
            return Err(KernelError::Gone(format!("{what} failed: {e}")));
        }
        let _ = self.stdin.flush().await;
        Ok(())
    }

    /// Has the kernel killed with all it started and a fresh one forked (variables are
    /// lost, files kept); the answer of a call in flight is dropped.
    pub(super) async fn replace_kernel(&mut self) -> Result<(), KernelError> {
        self.write(&json!({"op": "kill"}), "asking for a fresh interpreter")
            .await?;
        loop {
            let message = match self.read_line(REPLACE_TIMEOUT).await {
                // A kernel that died just as it was killed: its message, then ours.
                Err(KernelError::Died(_)) => continue,
                other => other?,
            };
            if message.get("killed").is_some() {
                self.busy = false;
                return match message["killed"] == true {
                    true => Ok(()),
                    false => Err(KernelError::Gone(format!(
                        "no fresh interpreter: {}",
                        message["error"].as_str().unwrap_or("")
                    ))),
                };
            }
        }
    }
}
