//! `PythonSandbox`: a persistent, resource-limited `python3` process per instance, like a
//! notebook kernel — variables and files persist between the calls of one chain.
//!
//! # What is enforced
//!
//! Always: a fresh temporary working directory (also `HOME` and `TMPDIR`), a scrubbed
//! environment (`PATH`, `LANG`, `HOME`, `TMPDIR` only; `python -I`), resource limits
//! (`RLIMIT_CPU` per call and over the instance's life, `RLIMIT_AS`, `RLIMIT_NPROC`,
//! `RLIMIT_FSIZE`, `RLIMIT_NOFILE`, no core files), a wall-clock limit per call after which
//! the whole process group is killed and the interpreter restarted, output captured at the
//! file-descriptor level (subprocesses included) and capped with a visible marker, stdin
//! closed, and forked children that return to the kernel stopped.
//!
//! When the host runs as **root**: each instance gets an unprivileged uid of its own (from
//! [`SandboxConfig::uid_range`]), so its working directory (mode 0700) is private from other
//! instances, it cannot write outside it except in world-writable places (`/tmp`), cannot
//! signal the host or other instances, `RLIMIT_NPROC` counts only its own processes, and
//! every process it started is killed after each call.
//!
//! When `unshare --net` works (root, or a kernel that allows it): a network namespace with
//! no interfaces, so no socket reaches anything.
//!
//! Not as root: the code runs as the host's user. The limits still hold, but it can read
//! and write whatever that user can, signal the host process, and `RLIMIT_NPROC` counts all
//! of that user's processes. [`PythonSandbox::isolation`] reports what applies.

mod config;
pub(crate) mod process;
pub mod tools;

pub use config::SandboxConfig;
pub use process::Isolation;

use crate::lines::{self, Line};
use agentfly_core::Sample;
use agentfly_core::env::{Env, EnvError};
use process::{UidLease, kill_group};
use serde::Deserialize;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const KERNEL: &str = include_str!("kernel.py");

/// The longest message the kernel may send (a cell's capped output is far below it).
const MAX_MESSAGE_BYTES: u64 = 16 << 20;

/// What one call printed and returned.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CellOutput {
    /// Standard output (of the code and its subprocesses), capped.
    pub stdout: String,
    /// Standard error, capped.
    pub stderr: String,
    /// The `repr` of the last expression, when it is not `None` (as a notebook shows it).
    pub value: Option<String>,
    /// The exception and its traceback, or why the call was cut off.
    pub error: Option<String>,
    /// Something was cut to the output cap.
    pub truncated: bool,
    /// The call ran past its wall-clock limit.
    pub timed_out: bool,
    /// The interpreter was killed and restarted, so earlier variables are gone.
    pub restarted: bool,
    /// CPU seconds the call used.
    pub cpu_seconds: f64,
    /// Wall-clock time of the call.
    pub wall_seconds: f64,
}

impl CellOutput {
    /// The text a model reads: stdout, then stderr, the value and the error, each only when
    /// there is one; `(no output)` when there is nothing.
    pub fn render(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.stdout.is_empty() {
            parts.push(self.stdout.trim_end_matches('\n').to_string());
        }
        if !self.stderr.is_empty() {
            parts.push(format!("[stderr]\n{}", self.stderr.trim_end_matches('\n')));
        }
        if let Some(value) = &self.value {
            parts.push(value.clone());
        }
        if let Some(error) = &self.error {
            parts.push(error.trim_end_matches('\n').to_string());
        }
        if parts.is_empty() {
            "(no output)".to_string()
        } else {
            parts.join("\n")
        }
    }

    /// Did the code fail (exception, timeout, crash)?
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }
}

/// A running kernel.
struct Kernel {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pgid: u32,
    /// A request was sent whose answer was never read (the call was cancelled).
    busy: bool,
}

/// Why the kernel gave no answer.
#[derive(Debug)]
enum KernelError {
    /// None within the time allowed.
    NoAnswer(Duration),
    /// It is gone, or answered nonsense.
    Gone(String),
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelError::NoAnswer(after) => {
                write!(f, "no answer within {:.1} s", after.as_secs_f64())
            }
            KernelError::Gone(why) => f.write_str(why),
        }
    }
}

/// A persistent Python interpreter in a sandbox; an [`Env`], leased per chain.
pub struct PythonSandbox {
    config: SandboxConfig,
    kernel: Option<Kernel>,
    // Field order matters on drop: the kernel is killed before the uid is released and
    // before the directory is removed.
    uid: Option<UidLease>,
    workdir: tempfile::TempDir,
    isolation: Isolation,
    calls: u64,
    restarts: u64,
}

impl std::fmt::Debug for PythonSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonSandbox")
            .field("workdir", &self.workdir.path())
            .field("uid", &self.uid.as_ref().map(|u| u.uid))
            .field("isolation", &self.isolation)
            .field("calls", &self.calls)
            .field("restarts", &self.restarts)
            .finish()
    }
}

fn env_err(context: &str, e: impl std::fmt::Display) -> EnvError {
    EnvError::new(format!("python sandbox: {context}: {e}"))
}

impl PythonSandbox {
    /// Starts an interpreter with `config`.
    pub async fn start(config: SandboxConfig) -> Result<Self, EnvError> {
        let isolation = Isolation::probe();
        let uid = if isolation.root && config.drop_privileges {
            Some(UidLease::reserve(config.uid_range).map_err(|e| env_err("no free uid", e))?)
        } else {
            None
        };
        let workdir = tempfile::Builder::new()
            .prefix("agentfly-sandbox-")
            .tempdir()
            .map_err(|e| env_err("creating the working directory", e))?;
        std::fs::set_permissions(workdir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| env_err("securing the working directory", e))?;
        if let Some(uid) = &uid {
            std::os::unix::fs::chown(workdir.path(), Some(uid.uid), Some(uid.uid))
                .map_err(|e| env_err("handing the working directory to the sandbox uid", e))?;
        }
        let mut sandbox = PythonSandbox {
            config,
            kernel: None,
            uid,
            workdir,
            isolation,
            calls: 0,
            restarts: 0,
        };
        sandbox.spawn().await?;
        Ok(sandbox)
    }

    /// What this sandbox enforces beyond the resource limits.
    pub fn isolation(&self) -> Isolation {
        Isolation {
            root: self.uid.is_some(),
            network_namespace: self.isolation.network_namespace && self.config.isolate_network,
        }
    }

    /// The working directory of the code.
    pub fn workdir(&self) -> &std::path::Path {
        self.workdir.path()
    }

    /// How it was made.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Calls run so far, and restarts of the interpreter.
    pub fn stats(&self) -> (u64, u64) {
        (self.calls, self.restarts)
    }

    async fn spawn(&mut self) -> Result<(), EnvError> {
        let python = self.config.python();
        let isolate = self.config.isolate_network && self.isolation.network_namespace;
        let mut command = if isolate {
            let mut c = Command::new("unshare");
            c.arg("--net").arg("--").arg(&python);
            c
        } else {
            Command::new(&python)
        };
        let cfg = json!({
            "uid": self.uid.as_ref().map(|u| u.uid),
            "capture_bytes": self.config.max_output_chars * 4 + 4,
            "cpu_seconds_per_call": self.config.cpu_seconds_per_call,
            "cpu_seconds_total": self.config.cpu_seconds_total,
            "memory_bytes": self.config.memory_bytes,
            "max_processes": self.config.max_processes,
            "max_file_bytes": self.config.max_file_bytes,
            "max_open_files": self.config.max_open_files,
        });
        let dir = self.workdir.path();
        command
            .args(["-I", "-u", "-c", KERNEL])
            .arg(cfg.to_string())
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| env_err(&format!("starting {}", python.display()), e))?;
        let pgid = child.id().unwrap_or(0);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut stderr = child.stderr.take().expect("piped stderr");
        self.kernel = Some(Kernel {
            child,
            stdin,
            stdout,
            pgid,
            busy: false,
        });
        let ready = self.read_line(self.config.startup_timeout).await;
        match ready {
            Ok(v) if v["ready"] == true => Ok(()),
            other => {
                self.kill();
                let mut text = String::new();
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text),
                )
                .await;
                let why = match other {
                    Ok(v) => format!("unexpected first message {v}"),
                    Err(e) => e.to_string(),
                };
                Err(env_err(
                    "the interpreter did not start",
                    format!("{why}; its stderr: {}", text.trim()),
                ))
            }
        }
    }

    /// Kills the interpreter and everything it started.
    fn kill(&mut self) {
        if let Some(mut kernel) = self.kernel.take() {
            kill_group(kernel.pgid);
            let _ = kernel.child.start_kill();
        }
        if let Some(uid) = &self.uid {
            uid.kill_all();
        }
    }

    async fn restart(&mut self) -> Result<(), EnvError> {
        self.kill();
        self.restarts += 1;
        self.spawn().await
    }

    fn kernel(&mut self) -> Result<&mut Kernel, KernelError> {
        self.kernel
            .as_mut()
            .ok_or_else(|| KernelError::Gone("the interpreter is not running".into()))
    }

    async fn read_line(&mut self, timeout: Duration) -> Result<Value, KernelError> {
        let kernel = self.kernel()?;
        // Bounded: code can write to the kernel's channel too.
        let read = lines::read_line(&mut kernel.stdout, MAX_MESSAGE_BYTES);
        match tokio::time::timeout(timeout, read).await {
            Err(_) => Err(KernelError::NoAnswer(timeout)),
            Ok(Err(e)) => Err(KernelError::Gone(format!("reading its answer failed: {e}"))),
            Ok(Ok(Line::Closed)) => Err(KernelError::Gone(
                match lines::exit_status(&mut kernel.child).await {
                    Some(status) => format!("the interpreter exited ({status})"),
                    None => "the interpreter closed its output".to_string(),
                },
            )),
            Ok(Ok(Line::TooLong)) => Err(KernelError::Gone(format!(
                "it sent a message over {MAX_MESSAGE_BYTES} bytes"
            ))),
            Ok(Ok(Line::Message(line))) => {
                lines::parse(&line).map_err(|e| KernelError::Gone(format!("bad answer: {e}")))
            }
        }
    }

    /// Sends one request line; the kernel is busy until its answer is read.
    async fn send(&mut self, request: &Value) -> Result<(), KernelError> {
        if self.kernel.as_ref().is_some_and(|k| k.busy) {
            // The last call was cancelled mid-way: its answer would be read as this one's.
            self.restart()
                .await
                .map_err(|e| KernelError::Gone(e.to_string()))?;
        }
        self.kernel()?.busy = true;
        self.write_message(request, "sending the request").await
    }

    /// Writes one JSON line to the kernel (a request, or the answer to a cell's tool call).
    async fn write_message(&mut self, message: &Value, what: &str) -> Result<(), KernelError> {
        let kernel = self.kernel()?;
        let line = format!("{message}\n");
        if let Err(e) = kernel.stdin.write_all(line.as_bytes()).await {
            return Err(KernelError::Gone(format!("{what} failed: {e}")));
        }
        let _ = kernel.stdin.flush().await;
        Ok(())
    }

    async fn request(&mut self, request: Value, timeout: Duration) -> Result<Value, KernelError> {
        self.send(&request).await?;
        let answer = self.read_line(timeout).await?;
        self.kernel()?.busy = false;
        Ok(answer)
    }

    /// Runs `code` as one notebook cell. Never fails: a timeout or a crash is reported in
    /// the output and the interpreter restarted for the next call.
    pub async fn run(&mut self, code: &str) -> CellOutput {
        self.run_with_tools(code, None).await
    }

    /// The output of a call that got no answer: why, and the interpreter restarted.
    async fn lost_call(&mut self, why: KernelError) -> CellOutput {
        let timed_out = matches!(why, KernelError::NoAnswer(_));
        let what = if timed_out {
            format!(
                "Execution timed out after {:.0} s and was stopped.",
                self.config.call_timeout.as_secs_f64()
            )
        } else {
            format!("The Python process died: {why}.")
        };
        let restarted = self.restart().await.is_ok();
        let after = if restarted {
            " The interpreter was restarted: variables defined before are lost; files \
             in the working directory are kept."
        } else {
            " The interpreter could not be restarted."
        };
        CellOutput {
            error: Some(format!("{what}{after}")),
            timed_out,
            restarted,
            ..CellOutput::default()
        }
    }

    fn parse_cell(&self, v: Value) -> CellOutput {
        #[derive(Deserialize)]
        struct Raw {
            stdout: String,
            stdout_bytes: u64,
            stderr: String,
            stderr_bytes: u64,
            value: Option<String>,
            error: Option<String>,
            cpu_seconds: f64,
        }
        let Ok(raw) = serde_json::from_value::<Raw>(v.clone()) else {
            return CellOutput {
                error: Some(format!("the interpreter answered {v}")),
                ..CellOutput::default()
            };
        };
        let max = self.config.max_output_chars;
        let mut truncated = false;
        let mut cap = |text: String, produced: Option<u64>| {
            let (text, cut) = cap_chars(text, max, produced);
            truncated |= cut;
            text
        };
        let stdout = cap(raw.stdout, Some(raw.stdout_bytes));
        let stderr = cap(raw.stderr, Some(raw.stderr_bytes));
        let value = raw.value.map(|v| cap(v, None));
        let error = raw.error.map(|e| cap(e, None));
        CellOutput {
            stdout,
            stderr,
            value,
            error,
            truncated,
            cpu_seconds: raw.cpu_seconds,
            ..CellOutput::default()
        }
    }
}

/// Keeps the first `max` characters of `text` and says how much was cut, counting the
/// bytes `produced` in all when the kernel captured only part of them.
fn cap_chars(mut text: String, max: usize, produced: Option<u64>) -> (String, bool) {
    let cut = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let total = produced.unwrap_or(0).max(text.len() as u64);
    let rest = total - cut as u64;
    if rest == 0 {
        return (text, false);
    }
    text.truncate(cut);
    text.push_str(&format!("\n…[output truncated: {rest} more bytes]"));
    (text, true)
}

impl Drop for PythonSandbox {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Env for PythonSandbox {
    type Config = SandboxConfig;

    async fn create(config: &SandboxConfig) -> Result<Self, EnvError> {
        PythonSandbox::start(config.clone()).await
    }

    /// A fresh namespace, an empty working directory, no leftover processes.
    async fn reset(&mut self, _sample: Option<&Sample>) -> Result<(), EnvError> {
        if self.kernel.is_none() {
            return self.restart().await;
        }
        match self
            .request(json!({"op": "reset"}), self.config.call_timeout)
            .await
        {
            Ok(v) if v["ok"] == true => Ok(()),
            _ => self.restart().await,
        }
    }

    /// The interpreter answers, and has CPU time left for a call.
    async fn health_check(&mut self) -> Result<(), EnvError> {
        let answer = self
            .request(json!({"op": "ping"}), Duration::from_secs(5))
            .await
            .map_err(|e| env_err("health check", e))?;
        match answer["cpu_seconds_left"].as_f64() {
            Some(left) if left < self.config.cpu_seconds_per_call as f64 => Err(env_err(
                "health check",
                format!("only {left:.1} CPU seconds left of its budget"),
            )),
            _ => Ok(()),
        }
    }

    async fn close(mut self) {
        self.kill();
    }
}
