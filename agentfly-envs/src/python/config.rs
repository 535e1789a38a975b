//! How sandboxes are made: interpreter, limits, isolation.

use agentfly_core::tool::BridgeLimits;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The limits and isolation of a [`PythonSandbox`](super::PythonSandbox). Every field has
/// a default; in TOML, durations are seconds.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The interpreter; by default `/usr/bin/python3` when it exists, else `python3` on
    /// `PATH`.
    pub python: Option<PathBuf>,
    /// Wall-clock limit of one call; past it the process group is killed and the
    /// interpreter restarted (its variables are lost, its files kept).
    #[serde(with = "agentfly_core::env::duration_secs")]
    pub call_timeout: Duration,
    /// How long the interpreter may take to start.
    #[serde(with = "agentfly_core::env::duration_secs")]
    pub startup_timeout: Duration,
    /// CPU seconds one call may use (`RLIMIT_CPU`, raised before each call).
    pub cpu_seconds_per_call: u64,
    /// CPU seconds one lease's interpreter may use over its life (past them it is killed,
    /// and a fresh one forked, empty of variables).
    pub cpu_seconds_total: u64,
    /// Address space of the interpreter and each child (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Processes (`RLIMIT_NPROC`; per user, so it is exact only with a uid of its own).
    pub max_processes: u64,
    /// Largest file the code may write (`RLIMIT_FSIZE`); also bounds captured output.
    pub max_file_bytes: u64,
    /// Open files (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// Bytes the code may store in `/tmp` and its working directory together (the size of
    /// its private tmpfs), where the system allows a mount namespace.
    pub max_disk_bytes: u64,
    /// Files and directories the code may have in `/tmp` and its working directory
    /// together (the tmpfs's inodes), where the system allows a mount namespace.
    pub max_files: u64,
    /// Characters of stdout, stderr, value or traceback kept per call; the rest is cut
    /// with a visible marker.
    pub max_output_chars: usize,
    /// Run in a network namespace of its own (no network at all) where the system allows.
    pub isolate_network: bool,
    /// When started as root, run as an unprivileged uid of its own (from `uid_range`).
    pub drop_privileges: bool,
    /// The uids given to sandboxes when privileges are dropped, one per live instance.
    pub uid_range: (u32, u32),
    /// Bounds on the calls one cell makes to the chain's tools (defined as functions in
    /// the namespace).
    pub tool_calls: BridgeLimits,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            python: None,
            call_timeout: Duration::from_secs(10),
            startup_timeout: Duration::from_secs(20),
            cpu_seconds_per_call: 10,
            cpu_seconds_total: 600,
            memory_bytes: 1 << 30,
            max_processes: 64,
            max_file_bytes: 64 << 20,
            max_open_files: 256,
            max_disk_bytes: 128 << 20,
            max_files: 4096,
            max_output_chars: 8000,
            isolate_network: true,
            drop_privileges: true,
            uid_range: (61_000, 62_000),
            tool_calls: BridgeLimits::default(),
        }
    }
}

impl SandboxConfig {
    /// The interpreter to start.
    pub fn python(&self) -> PathBuf {
        self.python.clone().unwrap_or_else(|| {
            let system = PathBuf::from("/usr/bin/python3");
            if system.exists() {
                system
            } else {
                PathBuf::from("python3")
            }
        })
    }
}
