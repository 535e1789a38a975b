//! `PythonSandbox`: a persistent, resource-limited Python interpreter per lease, like a
//! notebook kernel — variables and files persist between the calls of one chain, and no
//! chain sees what an earlier chain did.
//!
//! # How
//!
//! Each instance is a supervisor process (`supervisor.py`) that never runs a cell: a fork
//! server. Every lease gets a kernel forked from it (`kernel.py`), so its interpreter is
//! one no earlier chain has touched — no thread, patched module, environment variable,
//! signal handler or file of an earlier chain survives — and it is ready when the lease
//! begins (the fork happens when the last lease ends). The host talks only to the
//! supervisor, which relays a cell and its tool calls to the kernel over the kernel's own
//! socket: the host's channel is closed in every kernel, so a cell reaches nothing but
//! its own lease's channel, through which it can do what its tool functions do.
//!
//! # What is enforced
//!
//! Always: a scrubbed environment (`PATH`, `LANG`, `HOME`, `TMPDIR` only; `python -I`),
//! resource limits (`RLIMIT_CPU` per call and over the lease, `RLIMIT_AS`, `RLIMIT_NPROC`,
//! `RLIMIT_FSIZE`, `RLIMIT_NOFILE`, no core files), no privilege gained through set-uid
//! programs, a wall-clock limit per call after which the kernel and everything it started
//! are killed and a fresh kernel forked, output captured at the file-descriptor level
//! (subprocesses included) and capped with a visible marker, stdin closed, and forked
//! children that return to the kernel stopped.
//!
//! Where the system allows namespaces (as root, or with unprivileged user namespaces), each
//! instance also gets ([`Isolation`] says what held):
//! - a network namespace with no interfaces, so no socket reaches anything;
//! - a mount namespace where every host mount is read-only and `/tmp` (seen also at
//!   `/var/tmp` and `/dev/shm`) is a tmpfs of its own, bounded in bytes and files
//!   ([`SandboxConfig::max_disk_bytes`], [`SandboxConfig::max_files`]) and made anew for
//!   every lease; the working directory is `/tmp/work`;
//! - a PID namespace per kernel: the code sees none of the host's processes, and all it
//!   started die with it.
//!
//! As **root**, each instance also runs its code as an unprivileged uid of its own (from
//! [`SandboxConfig::uid_range`]): it cannot signal the host or other instances, and
//! `RLIMIT_NPROC` counts only its own processes.
//!
//! Without namespaces and not as root, the limits hold but the code runs as the host's
//! user in the host's namespaces: it can reach the network and write whatever that user
//! can. Runs that use the sandbox print [`Isolation::describe`] at their start.
//! `AGENTFLY_SANDBOX_NAMESPACES=none` turns the namespaces off (where `unshare`
//! misbehaves).

mod config;
pub(crate) mod process;
mod supervisor;
pub mod tools;

pub use config::SandboxConfig;
pub use process::Isolation;

use agentfly_core::Sample;
use agentfly_core::env::{Env, EnvError};
use process::{Namespaces, UidLease};
use serde::Deserialize;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use supervisor::{KernelError, Launch, Supervisor};

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

/// A persistent Python interpreter in a sandbox; an [`Env`], leased per chain.
///
/// ```
/// use agentfly_core::env::Env;
/// use agentfly_envs::{PythonSandbox, SandboxConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = tokio::runtime::Runtime::new()?;
/// runtime.block_on(async {
///     let mut sandbox = PythonSandbox::start(SandboxConfig::default()).await?;
///     // Variables persist between the calls of one chain, like a notebook's cells.
///     sandbox.run("x = 6 * 7").await;
///     assert_eq!(sandbox.run("print(x)").await.render(), "42");
///     // An exception is output the model reads, not a failure of the sandbox.
///     let out = sandbox.run("1 / 0").await;
///     assert!(out.is_error() && out.render().contains("ZeroDivisionError"));
///     // Back in its pool, the next chain gets an interpreter no chain has touched.
///     sandbox.reset(None).await?;
///     assert!(sandbox.run("print(x)").await.render().contains("NameError"));
///     Ok::<_, Box<dyn std::error::Error>>(())
/// })?;
/// # Ok(())
/// # }
/// ```
pub struct PythonSandbox {
    config: SandboxConfig,
    supervisor: Option<Supervisor>,
    // Field order matters on drop: the supervisor is killed before the uid is released and
    // before the directory is removed.
    uid: Option<UidLease>,
    /// The working directory on the host's filesystem, used where there is no private
    /// `/tmp`.
    host_workdir: tempfile::TempDir,
    /// The working directory as the code sees it.
    workdir: PathBuf,
    isolation: Isolation,
    calls: u64,
    restarts: u64,
}

impl std::fmt::Debug for PythonSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonSandbox")
            .field("workdir", &self.workdir)
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
    /// Starts a sandbox (its supervisor and a first kernel) with `config`.
    pub async fn start(config: SandboxConfig) -> Result<Self, EnvError> {
        let uid = if nix::unistd::geteuid().is_root() && config.drop_privileges {
            Some(UidLease::reserve(config.uid_range).map_err(|e| env_err("no free uid", e))?)
        } else {
            None
        };
        let host_workdir = tempfile::Builder::new()
            .prefix("agentfly-sandbox-")
            .tempdir()
            .map_err(|e| env_err("creating the working directory", e))?;
        std::fs::set_permissions(host_workdir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| env_err("securing the working directory", e))?;
        if let Some(uid) = &uid {
            std::os::unix::fs::chown(host_workdir.path(), Some(uid.uid), Some(uid.uid))
                .map_err(|e| env_err("handing the working directory to the sandbox uid", e))?;
        }
        let mut sandbox = PythonSandbox {
            workdir: host_workdir.path().to_path_buf(),
            config,
            supervisor: None,
            uid,
            host_workdir,
            isolation: Isolation::default(),
            calls: 0,
            restarts: 0,
        };
        sandbox.spawn().await?;
        Ok(sandbox)
    }

    /// What this sandbox enforces beyond the resource limits, as its supervisor found it.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The isolation a sandbox made with `config` gets on this system: one is started,
    /// asked and closed (for a run's start, to say what holds before any chain runs).
    pub async fn probe_isolation(config: &SandboxConfig) -> Result<Isolation, EnvError> {
        let sandbox = PythonSandbox::start(config.clone()).await?;
        let isolation = sandbox.isolation();
        sandbox.close().await;
        Ok(isolation)
    }

    /// The working directory of the code, as the code sees it (`/tmp/work` on a private
    /// `/tmp`, which the host does not see).
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The process id of the sandbox's supervisor, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.supervisor.as_ref().and_then(Supervisor::pid)
    }

    /// How it was made.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Calls run so far, and restarts of the interpreter within a lease (after a timeout,
    /// a crash or a lost sandbox; the fresh interpreter of a new lease is not one).
    pub fn stats(&self) -> (u64, u64) {
        (self.calls, self.restarts)
    }

    async fn spawn(&mut self) -> Result<(), EnvError> {
        let python = self.config.python();
        let config = json!({
            "uid": self.uid.as_ref().map(|u| u.uid),
            "capture_bytes": self.config.max_output_chars * 4 + 4,
            "cpu_seconds_per_call": self.config.cpu_seconds_per_call,
            "cpu_seconds_total": self.config.cpu_seconds_total,
            "memory_bytes": self.config.memory_bytes,
            "max_processes": self.config.max_processes,
            "max_file_bytes": self.config.max_file_bytes,
            "max_open_files": self.config.max_open_files,
            "max_disk_bytes": self.config.max_disk_bytes,
            "max_files": self.config.max_files,
        });
        let launch = Launch {
            python: &python,
            namespaces: Namespaces::probe(),
            isolate_network: self.config.isolate_network,
            host_workdir: self.host_workdir.path(),
            config,
            startup_timeout: self.config.startup_timeout,
        };
        let (supervisor, ready) = Supervisor::start(launch)
            .await
            .map_err(|why| env_err("the interpreter did not start", why))?;
        self.supervisor = Some(supervisor);
        self.workdir = ready.workdir;
        self.isolation = Isolation {
            network_namespace: ready.isolation.network_namespace && self.config.isolate_network,
            ..ready.isolation
        };
        Ok(())
    }

    /// Kills the sandbox and everything it started.
    fn kill(&mut self) {
        if let Some(mut supervisor) = self.supervisor.take() {
            supervisor.kill();
        }
        if let Some(uid) = &self.uid {
            uid.kill_all();
        }
    }

    /// The whole sandbox started anew (its supervisor was lost).
    async fn restart(&mut self) -> Result<(), EnvError> {
        self.kill();
        self.restarts += 1;
        self.spawn().await
    }

    fn supervisor(&mut self) -> Result<&mut Supervisor, KernelError> {
        self.supervisor
            .as_mut()
            .ok_or_else(|| KernelError::Gone("the sandbox is not running".into()))
    }

    async fn read_line(&mut self, timeout: Duration) -> Result<Value, KernelError> {
        self.supervisor()?.read_line(timeout).await
    }

    /// Sends one request line; the sandbox is busy until its answer is read.
    async fn send(&mut self, request: &Value) -> Result<(), KernelError> {
        if self.supervisor.as_ref().is_some_and(|s| s.busy) {
            // The last call was cancelled mid-way: its answer would be read as this one's.
            self.fresh_kernel().await?;
        }
        self.supervisor()?.busy = true;
        self.write_message(request, "sending the request").await
    }

    /// Writes one JSON line to the sandbox (a request, or the answer to a tool call).
    async fn write_message(&mut self, message: &Value, what: &str) -> Result<(), KernelError> {
        self.supervisor()?.write(message, what).await
    }

    /// A fresh kernel in place of the running one (variables lost, files kept); if the
    /// supervisor does not manage it, the whole sandbox is restarted.
    async fn fresh_kernel(&mut self) -> Result<(), KernelError> {
        self.restarts += 1;
        match self.supervisor()?.replace_kernel().await {
            Ok(()) => Ok(()),
            Err(_) => {
                self.restarts -= 1;
                self.restart()
                    .await
                    .map_err(|e| KernelError::Gone(e.to_string()))
            }
        }
    }

    async fn request(&mut self, request: Value, timeout: Duration) -> Result<Value, KernelError> {
        self.send(&request).await?;
        let answer = self.read_line(timeout).await?;
        self.supervisor()?.busy = false;
        Ok(answer)
    }

    /// Runs `code` as one notebook cell. Never fails: a timeout or a crash is reported in
    /// the output and a fresh interpreter forked for the next call.
    pub async fn run(&mut self, code: &str) -> CellOutput {
        self.run_with_tools(code, None).await
    }

    /// The output of a call that got no answer: why, and the interpreter replaced.
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
        let restarted = match why {
            // The supervisor forked a fresh kernel already.
            KernelError::Died(_) => {
                self.restarts += 1;
                true
            }
            KernelError::NoAnswer(_) => self.fresh_kernel().await.is_ok(),
            KernelError::Gone(_) => self.restart().await.is_ok(),
        };
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

    /// A fresh interpreter forked, an empty working directory and `/tmp`, no leftover
    /// processes: nothing of the last chain.
    async fn reset(&mut self, _sample: Option<&Sample>) -> Result<(), EnvError> {
        if self.supervisor.is_none() {
            return self.restart().await;
        }
        match self
            .request(json!({"op": "reset"}), self.config.startup_timeout)
            .await
        {
            Ok(v) if v["ok"] == true => Ok(()),
            _ => self.restart().await,
        }
    }

    /// The supervisor answers.
    async fn health_check(&mut self) -> Result<(), EnvError> {
        let answer = self
            .request(json!({"op": "ping"}), Duration::from_secs(5))
            .await
            .map_err(|e| env_err("health check", e))?;
        match answer["ok"] == true {
            true => Ok(()),
            false => Err(env_err("health check", answer)),
        }
    }

    async fn close(mut self) {
        self.kill();
    }
}
