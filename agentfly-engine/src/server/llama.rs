//! llama.cpp servers the trainer runs itself: started on a GGUF, restarted on the next
//! one after each weight update (llama.cpp cannot swap a model's weights in place), on the
//! same ports, so the policy's URLs stay valid. A server that exits or does not become
//! healthy in time is an error naming its log. The servers' process ids are kept in
//! `llama-servers.pid` beside their logs: a run whose trainer was killed (its servers
//! outliving it) and is started again in the same directory stops them first.

use agentfly_model::io::GgufDtype;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `[rollout.llama_server]`: roll out on llama.cpp servers the trainer starts, and pushes
/// each update's weights to (as a GGUF file, then a restart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlamaServerConfig {
    /// The `llama-server` binary. Default: `$AGENTFLY_LLAMA_SERVER`, else
    /// `.llama/bin/llama-server` (what `scripts/build-llama-server` builds).
    pub binary: Option<PathBuf>,
    /// The GGUF whose metadata (hyperparameters, tokenizer, chat template) and tensor names
    /// each written policy takes. Default: `model.path` when it is a `.gguf` file.
    pub gguf: Option<PathBuf>,
    /// How the written policies store their matrices: `f32` (exactly the trained weights)
    /// or `f16`.
    pub dtype: GgufDtype,
    /// How many servers (processes) to run; requests go to them in turn.
    pub servers: usize,
    /// Sequences each server decodes at once (llama.cpp's `--parallel`).
    pub parallel: usize,
    /// Tokens of context per sequence (llama.cpp's `--ctx-size` is this × `parallel`).
    pub context: usize,
    /// Threads per server (0: llama.cpp's default).
    pub threads: usize,
    /// The type of the servers' cached keys and values (`f32`, `f16`, `q8_0`, ...).
    /// llama.cpp's default, `f16`, rounds every cached key and value and moves the sampled
    /// tokens' log-probabilities ~1e-3 from the trained model's; `f32` keeps them exact.
    pub kv_cache: String,
    /// The longest a server may take to become healthy, in seconds.
    pub start_timeout_secs: u64,
    /// The longest one generation request may take, in seconds.
    pub request_timeout_secs: u64,
    /// More arguments for every server.
    pub extra_args: Vec<String>,
}

impl Default for LlamaServerConfig {
    fn default() -> Self {
        Self {
            binary: None,
            gguf: None,
            dtype: GgufDtype::F32,
            servers: 1,
            parallel: 4,
            context: 4096,
            threads: 0,
            kv_cache: "f32".into(),
            start_timeout_secs: 120,
            request_timeout_secs: 300,
            extra_args: Vec::new(),
        }
    }
}

impl LlamaServerConfig {
    /// The binary to run: `binary`, `$AGENTFLY_LLAMA_SERVER` or `.llama/bin/llama-server`.
    pub fn binary(&self) -> PathBuf {
        self.binary
            .clone()
            .or_else(|| std::env::var_os("AGENTFLY_LLAMA_SERVER").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(".llama/bin/llama-server"))
    }
}

/// A server would not start or stopped answering.
#[derive(Debug, thiserror::Error)]
#[error("llama-server: {0}")]
pub struct LlamaServerError(pub String);

/// Running llama.cpp servers (see the module's documentation); stopped on drop.
#[derive(Debug)]
pub struct LlamaServers {
    config: LlamaServerConfig,
    binary: PathBuf,
    ports: Vec<u16>,
    children: Vec<Child>,
    /// Where the children's process ids are written.
    pid_file: PathBuf,
    logs: Vec<PathBuf>,
    model: PathBuf,
    restarts: u64,
    revived: u64,
}

impl LlamaServers {
    /// Starts `config.servers` servers on `model`, each on a free local port, logging to
    /// `log_dir/llama-server-<i>.log`; returns once all are healthy.
    pub fn start(
        config: &LlamaServerConfig,
        model: &Path,
        log_dir: &Path,
    ) -> Result<Self, LlamaServerError> {
        let binary = config.binary();
        if !binary.is_file() {
            return Err(LlamaServerError(format!(
                "{} does not exist: build it with scripts/build-llama-server, or set \
                 rollout.llama_server.binary or AGENTFLY_LLAMA_SERVER",
                binary.display()
            )));
        }
        std::fs::create_dir_all(log_dir)
            .map_err(|e| LlamaServerError(format!("{}: {e}", log_dir.display())))?;
        stop_orphans(log_dir);
        let n = config.servers.max(1);
        let ports = (0..n).map(|_| free_port()).collect::<Result<Vec<_>, _>>()?;
        let logs = (0..n)
            .map(|i| log_dir.join(format!("llama-server-{i}.log")))
            .collect();
        let mut servers = Self {
            config: config.clone(),
            binary,
            ports,
            children: Vec::new(),
            pid_file: log_dir.join(PID_FILE),
            logs,
            model: model.to_path_buf(),
            restarts: 0,
            revived: 0,
        };
        servers.launch()?;
        Ok(servers)
    }

    /// The servers' base URLs.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// The GGUF being served.
    pub fn model(&self) -> &Path {
        &self.model
    }

    /// How many times the servers were restarted on new weights.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Stops every server and starts it again on `model`, on the same port; returns once
    /// all are healthy. Call it when no request is in flight.
    pub fn restart(&mut self, model: &Path) -> Result<(), LlamaServerError> {
        self.stop();
        self.model = model.to_path_buf();
        self.restarts += 1;
        self.launch()
    }

    /// Starts again, on the model being served and on its port, every server that has
    /// exited or does not answer `/health` (crashed, killed, hung); returns how many, once
    /// they are healthy. Call it when no request is in flight (the trainer does before
    /// each rollout).
    pub fn revive(&mut self) -> Result<usize, LlamaServerError> {
        let agent = health_agent();
        let dead: Vec<usize> = (0..self.children.len())
            .filter(|&i| {
                let exited = matches!(self.children[i].try_wait(), Ok(Some(_)));
                exited || !healthy(&agent, self.ports[i])
            })
            .collect();
        for &i in &dead {
            let _ = self.children[i].kill();
            let _ = self.children[i].wait();
            self.children[i] = self.spawn(i)?;
        }
        self.write_pids();
        self.wait_healthy(&dead)?;
        self.revived += dead.len() as u64;
        Ok(dead.len())
    }

    /// How many servers [`LlamaServers::revive`] started again (exited or not answering).
    pub fn revived(&self) -> u64 {
        self.revived
    }

    fn launch(&mut self) -> Result<(), LlamaServerError> {
        for i in 0..self.ports.len() {
            let child = self.spawn(i)?;
            self.children.push(child);
            self.write_pids();
        }
        let all: Vec<usize> = (0..self.children.len()).collect();
        self.wait_healthy(&all)
    }

    /// Starts server `i` on the model, its port and its log.
    fn spawn(&self, i: usize) -> Result<Child, LlamaServerError> {
        let c = &self.config;
        let (port, log) = (self.ports[i], &self.logs[i]);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| LlamaServerError(format!("{}: {e}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(|e| LlamaServerError(format!("{}: {e}", log.display())))?;
        let mut command = Command::new(&self.binary);
        // Absolute, so a later run can tell from the command line whose server it is.
        let model = std::path::absolute(&self.model).unwrap_or_else(|_| self.model.clone());
        command
            .arg("--model")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--parallel", &c.parallel.max(1).to_string()])
            .args([
                "--ctx-size",
                &(c.context.max(1) * c.parallel.max(1)).to_string(),
            ])
            .args(["--cache-type-k", &c.kv_cache, "--cache-type-v", &c.kv_cache]);
        if c.threads > 0 {
            command.args(["--threads", &c.threads.to_string()]);
        }
        command
            .args(&c.extra_args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| LlamaServerError(format!("{}: {e}", self.binary.display())))
    }

    /// Waits until the servers `which` answer `/health`; one that exits or takes longer
    /// than `start_timeout_secs` stops them all and is an error.
    fn wait_healthy(&mut self, which: &[usize]) -> Result<(), LlamaServerError> {
        let deadline = Instant::now() + Duration::from_secs(self.config.start_timeout_secs);
        let agent = health_agent();
        for &i in which {
            loop {
                if let Ok(Some(status)) = self.children[i].try_wait() {
                    let why = format!(
                        "server {i} exited ({status}) while loading {}; its log, {}, ends: {}",
                        self.model.display(),
                        self.logs[i].display(),
                        log_tail(&self.logs[i])
                    );
                    self.stop();
                    return Err(LlamaServerError(why));
                }
                if healthy(&agent, self.ports[i]) {
                    break;
                }
                if Instant::now() > deadline {
                    let why = format!(
                        "server {i} did not become healthy within {} s (see {})",
                        self.config.start_timeout_secs,
                        self.logs[i].display()
                    );
                    self.stop();
                    return Err(LlamaServerError(why));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Kills every server and waits for it.
    fn stop(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pid_file);
    }

    /// Records the running servers' process ids (best effort: the file only helps a later
    /// run clean up after a killed trainer).
    fn write_pids(&self) {
        let pids: String = std::iter::once(format!("owner {}\n", std::process::id()))
            .chain(self.children.iter().map(|c| format!("{}\n", c.id())))
            .collect();
        let _ = std::fs::write(&self.pid_file, pids);
    }
}

/// Whether process `pid` exists and has not exited (a zombie has).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // "pid (comm) S ...": the state follows the last ')'.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// The file in the servers' directory that lists their process ids.
const PID_FILE: &str = "llama-servers.pid";

/// Kills the llama.cpp servers that `dir`'s pid file lists and that still run on a model
/// in `dir`: left by a trainer that was killed (SIGKILL skips the servers' cleanup). A
/// process id now used by anything else is left alone, and so are the servers of a
/// trainer that still runs (the same run started twice): that is only reported.
fn stop_orphans(dir: &Path) {
    let Ok(pids) = std::fs::read_to_string(dir.join(PID_FILE)) else {
        return;
    };
    let owner = pids
        .lines()
        .find_map(|l| l.strip_prefix("owner ")?.trim().parse::<i32>().ok());
    if let Some(owner) = owner.filter(|&o| o != std::process::id() as i32 && running(o)) {
        eprintln!(
            "llama-server: the servers in {} belong to process {owner}, which still runs; \
             they are left alone",
            dir.display()
        );
        return;
    }
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for pid in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<PathBuf> = cmdline
            .split(|&b| b == 0)
            .map(|a| PathBuf::from(String::from_utf8_lossy(a).into_owned()))
            .collect();
        let is_server = args
            .first()
            .and_then(|a| a.file_name())
            .is_some_and(|n| n.to_string_lossy().contains("llama-server"));
        let ours = args.windows(2).any(|w| {
            w[0] == Path::new("--model")
                && std::fs::canonicalize(&w[1])
                    .or_else(|_| std::path::absolute(&w[1]))
                    .is_ok_and(|m| m.starts_with(&dir))
        });
        if is_server && ours {
            let pid = nix::unistd::Pid::from_raw(pid);
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                eprintln!(
                    "killed llama-server {pid}, left running on {} by an earlier run",
                    dir.display()
                );
                // Not our child: wait for it to go, so its port and memory are free.
                for _ in 0..100 {
                    if !running(pid.as_raw()) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

impl Drop for LlamaServers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The client of the health checks: a server that does not answer in 5 s is not healthy.
fn health_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

/// Whether the server on `port` answers `/health` with 200 (ready).
fn healthy(agent: &ureq::Agent, port: u16) -> bool {
    agent
        .get(&format!("http://127.0.0.1:{port}/health"))
        .call()
        .is_ok_and(|r| r.status() == 200)
}

/// A port nothing listens on now.
fn free_port() -> Result<u16, LlamaServerError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| LlamaServerError(format!("no free local port: {e}")))
}

/// The last few lines of a log, on one line.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_named_with_how_to_build_it() {
        let config = LlamaServerConfig {
            binary: Some("/nonexistent/llama-server".into()),
            ..LlamaServerConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let err = LlamaServers::start(&config, Path::new("m.gguf"), dir.path()).unwrap_err();
        assert!(err.0.contains("scripts/build-llama-server"), "{err}");
    }

    #[test]
    fn a_server_that_exits_at_start_is_an_error_with_its_log() {
        // `false` exits at once, as a llama-server that cannot read its model does.
        let config = LlamaServerConfig {
            binary: Some("/bin/false".into()),
            start_timeout_secs: 10,
            ..LlamaServerConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let err = LlamaServers::start(&config, Path::new("m.gguf"), dir.path()).unwrap_err();
        assert!(err.0.contains("exited"), "{err}");
        assert!(err.0.contains("llama-server-0.log"), "{err}");
    }
}
