//! The two ways to reach a remote environment server: a child process spoken to over its
//! stdin/stdout, one JSON message per line, or a server's base URL over HTTP. Both bound
//! every call by a timeout and every answer by a size.

use super::config::{RemoteConfig, RemoteError};
use crate::lines::{self, Line};
use crate::python::process::kill_group;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a detached `close` may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a server's standard error is kept for error messages.
const STDERR_TAIL_BYTES: usize = 4096;

/// The `agentfly_remote` module, put on the child's `PYTHONPATH`.
const SERVER_MODULE: &str = include_str!("../../python/agentfly_remote.py");

/// The ready world servers, written beside it; `{worlds}` in a command names their folder.
const WORLDS: [(&str, &str); 2] = [
    (
        "serve_textworld_express.py",
        include_str!("../../python/worlds/serve_textworld_express.py"),
    ),
    (
        "serve_scienceworld.py",
        include_str!("../../python/worlds/serve_scienceworld.py"),
    ),
];

/// A connection to one server.
pub(super) enum Link {
    Stdio(Box<ChildServer>),
    Http(HttpServer),
}

impl Link {
    /// Starts the server (stdio) or checks the URL (HTTP), and says hello.
    pub(super) async fn open(config: &RemoteConfig) -> Result<(Link, Value), RemoteError> {
        let mut link = match (&config.url, config.command.is_empty()) {
            (Some(url), true) => Link::Http(HttpServer::new(url, config)),
            (None, false) => Link::Stdio(Box::new(ChildServer::spawn(config)?)),
            (Some(_), false) => {
                return Err(RemoteError::Config(
                    "give either `command` (a server to start) or `url`, not both".into(),
                ));
            }
            (None, true) => {
                return Err(RemoteError::Config(
                    "no server: set `command` (e.g. [\"python3\", \"world.py\"]) or `url`".into(),
                ));
            }
        };
        let hello = link.call("hello", json!({}), config.start_timeout).await?;
        Ok((link, hello))
    }

    /// One request and its result, within `timeout`.
    pub(super) async fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RemoteError> {
        match self {
            Link::Stdio(link) => link.call(method, params, timeout).await,
            Link::Http(link) => link.call(method, params, timeout).await,
        }
    }

    /// Stops a child server (and everything it started); nothing for HTTP.
    pub(super) fn kill(&mut self) {
        if let Link::Stdio(link) = self {
            link.kill();
        }
    }

    /// Over HTTP, asks the server to close `instance` without waiting for the answer (from
    /// a thread of its own, so it works where no runtime runs: in `Drop`): a lost or
    /// dropped instance must not live on in the server, its JVM with it.
    pub(super) fn close_detached(&self, instance: &Value) {
        if let Link::Http(link) = self {
            let request = link.request("close", CLOSE_TIMEOUT);
            let body = json!({"instance": instance}).to_string();
            std::thread::spawn(move || drop(request.send(body.as_str())));
        }
    }

    /// The child server's process id.
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            Link::Stdio(link) => link.pgid,
            Link::Http(_) => None,
        }
    }
}

/// A server started as a child process, in a process group of its own.
pub(super) struct ChildServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    pgid: Option<u32>,
    next_id: u64,
    max_bytes: u64,
    /// A request was sent and its answer not read (the call was cancelled): the server's
    /// state is unknown from here on.
    pending: bool,
    _module_dir: tempfile::TempDir,
}

impl ChildServer {
    fn spawn(config: &RemoteConfig) -> Result<ChildServer, RemoteError> {
        let module_dir = tempfile::Builder::new()
            .prefix("agentfly-remote-")
            .tempdir()
            .map_err(|e| RemoteError::Start(format!("a directory for the server module: {e}")))?;
        let written = || -> std::io::Result<()> {
            std::fs::write(module_dir.path().join("agentfly_remote.py"), SERVER_MODULE)?;
            std::fs::create_dir(module_dir.path().join("worlds"))?;
            for (name, text) in WORLDS {
                std::fs::write(module_dir.path().join("worlds").join(name), text)?;
            }
            Ok(())
        };
        written().map_err(|e| RemoteError::Start(format!("writing the server module: {e}")))?;
        let worlds = module_dir.path().join("worlds");
        let command: Vec<String> = config
            .command
            .iter()
            .map(|part| part.replace("{worlds}", &worlds.to_string_lossy()))
            .collect();
        let python_path = match std::env::var_os("PYTHONPATH") {
            Some(old) if !old.is_empty() => {
                let mut path = module_dir.path().as_os_str().to_owned();
                path.push(":");
                path.push(old);
                path
            }
            _ => module_dir.path().as_os_str().to_owned(),
        };
        let mut child = Command::new(&command[0]);
        child
            .args(&command[1..])
            .env("PYTHONPATH", python_path)
            .env("PYTHONUNBUFFERED", "1")
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &config.cwd {
            child.current_dir(dir);
        }
        let mut child = child
            .spawn()
            .map_err(|e| RemoteError::Start(format!("starting {:?}: {e}", command.join(" "))))?;
        let pgid = child.id();
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let mut err_pipe = child.stderr.take().expect("piped stderr");
        let tail = stderr.clone();
        // Drains the server's stderr (so it never blocks on a full pipe), keeping the tail.
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                tail.drain(..excess);
            }
        });
        Ok(ChildServer {
            child,
            stdin,
            stdout,
            stderr,
            pgid,
            next_id: 1,
            max_bytes: config.max_message_bytes,
            pending: false,
            _module_dir: module_dir,
        })
    }

    async fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RemoteError> {
        if self.pending {
            return Err(RemoteError::Lost(
                "an earlier call was cut off before its answer came".into(),
            ));
        }
        let id = self.next_id;
        self.next_id += 1;
        let line = format!(
            "{}\n",
            json!({"id": id, "method": method, "params": params})
        );
        self.pending = true;
        let exchange = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await?;
            lines::read_line(&mut self.stdout, self.max_bytes).await
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => {
                return Err(RemoteError::Timeout {
                    method: method.to_string(),
                    after: timeout,
                });
            }
            Ok(Err(e)) => return Err(RemoteError::Lost(self.gone(&format!("{e}")).await)),
            Ok(Ok(Line::Closed)) => {
                return Err(RemoteError::Lost(self.gone("it closed its output").await));
            }
            Ok(Ok(Line::TooLong)) => {
                return Err(RemoteError::Lost(format!(
                    "the server sent a message over {} bytes",
                    self.max_bytes
                )));
            }
            Ok(Ok(Line::Message(answer))) => answer,
        };
        self.pending = false;
        let message = lines::parse(&answer)
            .map_err(|e| RemoteError::Lost(format!("the server's answer is not JSON ({e})")))?;
        if message.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(RemoteError::Lost(format!(
                "the server answered request {:?}, not {id}",
                message.get("id")
            )));
        }
        result_of(method, message)
    }

    /// Why the server is gone: its exit status and the tail of its stderr.
    async fn gone(&mut self, what: &str) -> String {
        let status = lines::exit_status(&mut self.child).await;
        let tail = {
            let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
            String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
        };
        let mut why = match status {
            Some(status) => format!("the server exited ({status}): {what}"),
            None => format!("the server stopped answering: {what}"),
        };
        let tail = tail.trim();
        if !tail.is_empty() {
            why.push_str("; its last output: ");
            why.push_str(tail);
        }
        why
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A server reached over HTTP: `POST {url}/{method}` with the params as the body.
pub(super) struct HttpServer {
    base: String,
    agent: ureq::Agent,
    max_bytes: u64,
    token: Option<String>,
}

impl HttpServer {
    fn new(url: &str, config: &RemoteConfig) -> HttpServer {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(config.start_timeout))
            // Below the server's socket timeout (60 s by default): a kept-alive connection
            // the server has closed is not reused.
            .max_idle_age(Duration::from_secs(30))
            .build()
            .into();
        HttpServer {
            base: url.trim_end_matches('/').to_string(),
            agent,
            max_bytes: config.max_message_bytes,
            token: config
                .token
                .clone()
                .or_else(|| std::env::var("AGENTFLY_REMOTE_TOKEN").ok()),
        }
    }

    /// A `POST {base}/{method}` with the token, bounded by `timeout`.
    fn request(
        &self,
        method: &str,
        timeout: Duration,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut request = self
            .agent
            .post(format!("{}/{method}", self.base))
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request
    }

    async fn call(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RemoteError> {
        let limit = self.max_bytes;
        let body = params.to_string();
        let request = self.request(method, timeout);
        let request = tokio::task::spawn_blocking(move || {
            let mut response = request.send(body.as_str())?;
            let status = response.status().as_u16();
            let text = response
                .body_mut()
                .with_config()
                .limit(limit)
                .read_to_string()?;
            Ok::<_, ureq::Error>((status, text))
        });
        let (status, text) = match request.await {
            Err(e) => return Err(RemoteError::Lost(format!("the HTTP call failed: {e}"))),
            Ok(Err(ureq::Error::Timeout(_))) => {
                return Err(RemoteError::Timeout {
                    method: method.to_string(),
                    after: timeout,
                });
            }
            Ok(Err(e)) => return Err(RemoteError::Lost(format!("{}: {e}", self.base))),
            Ok(Ok(answer)) => answer,
        };
        let body = lines::parse(text.as_bytes())
            .map_err(|e| RemoteError::Lost(format!("the server's answer is not JSON ({e})")))?;
        let message = || body["error"]["message"].as_str().unwrap_or("").to_string();
        if status == 200 {
            Ok(body)
        } else if status == 404 && body["error"]["code"] == "no_instance" {
            // Closed, or reaped by the server after idling: gone for good.
            Err(RemoteError::Lost(format!("{}: {}", self.base, message())))
        } else if status == 401 {
            Err(RemoteError::Lost(format!(
                "{}: HTTP 401: {} (set the token: `token` in the configuration or \
                 AGENTFLY_REMOTE_TOKEN)",
                self.base,
                message()
            )))
        } else {
            result_of(
                method,
                json!({"error": body.get("error").cloned().unwrap_or(body)}),
            )
        }
    }
}

/// A response's result, or the error it carries.
fn result_of(method: &str, message: Value) -> Result<Value, RemoteError> {
    if let Some(error) = message.get("error") {
        let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_string);
        return Err(RemoteError::Server {
            method: method.to_string(),
            message: text("message").unwrap_or_else(|| error.to_string()),
            traceback: text("traceback"),
        });
    }
    Ok(message.get("result").cloned().unwrap_or(Value::Null))
}
