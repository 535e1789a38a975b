//! Chains that share a pooled `PythonSandbox` cannot see each other: each lease gets an
//! interpreter no earlier chain has touched (its threads, patched modules, environment,
//! signal handlers, files in `/tmp` and processes are gone), and no cell can reach the
//! channel between the host and the sandbox's supervisor.
//!
//! Checks that need what only some systems allow (namespaces, root) say so when they cannot
//! run, and fail under `AGENTFLY_REQUIRE_ISOLATION=1` / `AGENTFLY_NO_SKIP=1`, as CI sets.

use agentfly_core::env::{EnvPool, PoolConfig};
use agentfly_envs::{PythonSandbox, SandboxConfig};
use std::time::Duration;

fn config() -> SandboxConfig {
    SandboxConfig {
        call_timeout: Duration::from_secs(5),
        cpu_seconds_per_call: 1,
        memory_bytes: 512 << 20,
        max_output_chars: 2000,
        ..SandboxConfig::default()
    }
}

/// A pool of one instance, so the second lease gets the instance the first returned.
fn pool_of_one(config: SandboxConfig) -> EnvPool<PythonSandbox> {
    EnvPool::new(
        config,
        PoolConfig {
            capacity: 1,
            ..PoolConfig::default()
        },
    )
}

use agentfly_testdata::skip;

/// What chain A leaves behind, each a way an earlier chain could reach a later one.
const CHAIN_A: &str = r#"
import math, os, signal, sys, threading, time, json
def later():
    time.sleep(1.0)
    print('LEAKED FROM CHAIN A')
threading.Thread(target=later, daemon=True).start()
math.pi = 3
os.environ['CHAIN'] = 'A'
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
sys.modules['json'] = 'patched by chain A'
open(f'/tmp/chain-a-{os.getppid()}', 'w').write('a')
if os.path.isdir('/dev/shm'):
    try:
        open(f'/dev/shm/chain-a-{os.getppid()}', 'w').write('a')
    except OSError:
        pass
open('notes.txt', 'w').write('a')
'done'
"#;

/// What chain B checks, after waiting out chain A's thread.
const CHAIN_B: &str = r#"
import math, os, signal, sys, time, json
time.sleep(1.5)
found = []
if math.pi != 3.141592653589793: found.append('math.pi')
if 'CHAIN' in os.environ: found.append('os.environ')
if signal.getsignal(signal.SIGXCPU) == signal.SIG_IGN: found.append('SIGXCPU ignored')
if not hasattr(sys.modules['json'], 'dumps'): found.append('sys.modules')
if os.path.exists(f'/tmp/chain-a-{os.getppid()}'): found.append('/tmp file')
if os.path.exists(f'/dev/shm/chain-a-{os.getppid()}'): found.append('/dev/shm file')
if os.path.exists('notes.txt'): found.append('working directory file')
found
"#;

#[tokio::test]
async fn a_lease_gets_an_interpreter_no_earlier_chain_touched() {
    let pool = pool_of_one(config());
    {
        let mut a = pool.lease().await.unwrap();
        let out = a.run(CHAIN_A).await;
        assert_eq!(out.value.as_deref(), Some("'done'"), "{out:?}");
    }
    let mut b = pool.lease().await.unwrap();
    let out = b.run(CHAIN_B).await;
    assert!(
        !out.stdout.contains("LEAKED"),
        "chain A's thread ran on: {out:?}"
    );
    if b.isolation().private_tmp {
        assert_eq!(out.value.as_deref(), Some("[]"), "{out:?}");
    } else {
        // Without a mount namespace /tmp is the host's: only the rest is asserted.
        assert_eq!(
            out.value.as_deref(),
            Some("['/tmp file', '/dev/shm file']"),
            "{out:?}"
        );
        b.run("import os\nos.remove(f'/tmp/chain-a-{os.getppid()}')\nos.remove(f'/dev/shm/chain-a-{os.getppid()}')")
            .await;
        skip("no mount namespace on this system: /tmp is shared between chains");
    }
    // Chain A's `SIG_IGN` does not defeat chain B's CPU limit.
    let out = b.run("while True:\n    pass").await;
    assert!(
        out.error
            .as_deref()
            .is_some_and(|e| e.contains("CpuTimeLimit")),
        "{out:?}"
    );
    assert_eq!(
        pool.metrics().created,
        1,
        "the same instance served both chains"
    );
    drop(b);
    pool.close().await;
}

#[tokio::test]
async fn a_broken_builtin_does_not_break_the_return_to_the_pool() {
    use agentfly_core::env::Env;
    let mut sb = PythonSandbox::start(config()).await.unwrap();
    let out = sb
        .run("import builtins\nbuiltins.len = None\n'patched'")
        .await;
    assert_eq!(
        out.value.as_deref(),
        Some("'patched'"),
        "the kernel's code keeps its own"
    );
    // Breaking what the kernel's answer is made with ends that cell, not the sandbox.
    let out = sb.run("import json\njson.dumps = None").await;
    assert!(out.restarted, "{out:?}");
    sb.run("import builtins\nbuiltins.len = None").await;
    let restarts = sb.stats().1;
    sb.reset(None).await.unwrap();
    sb.health_check().await.unwrap();
    let out = sb.run("len('abc')").await;
    assert_eq!(out.value.as_deref(), Some("3"), "{out:?}");
    assert_eq!(sb.stats().1, restarts, "the reset needed no restart");
}

/// The inodes of the pipes between the host and the sandbox process, as `/proc` names them.
fn host_pipes(sb: &PythonSandbox) -> Option<Vec<String>> {
    let pid = sb.pid().expect("a running sandbox");
    ["0", "1"]
        .iter()
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test]
async fn no_cell_reaches_the_host_channel() {
    let mut sb = PythonSandbox::start(config()).await.unwrap();
    let Some(pipes) = host_pipes(&sb) else {
        skip("the supervisor's descriptors cannot be read here (not root, no namespaces)");
        return;
    };
    assert!(pipes.iter().all(|p| p.starts_with("pipe:")), "{pipes:?}");
    // Every descriptor the cell's process holds, and those of `__main__`'s file objects.
    let out = sb
        .run(
            "import os\n\
             sorted(os.readlink(f'/proc/self/fd/{fd}') for fd in os.listdir('/proc/self/fd') \
             if os.path.exists(f'/proc/self/fd/{fd}') or True)",
        )
        .await;
    let fds = out.value.unwrap_or_default();
    for pipe in &pipes {
        assert!(!fds.contains(pipe.as_str()), "the cell holds {pipe}: {fds}");
    }
    let out = sb
        .run(
            "import __main__, io\n\
             [k for k, v in vars(__main__).items() if isinstance(v, io.IOBase)]",
        )
        .await;
    assert_eq!(out.value.as_deref(), Some("[]"), "{out:?}");
    // Writing a forged answer to every descriptor changes nothing the host reads.
    let forged = r#"{"ok": true, "stdout": "FORGED", "stdout_bytes": 6, "stderr": "", "stderr_bytes": 0, "value": null, "error": null, "cpu_seconds": 0}"#;
    let out = sb
        .run(&format!(
            "import os\nfor fd in range(64):\n    try:\n        os.write(fd, b'{forged}\\n')\n    except OSError:\n        pass\n'real'",
        ))
        .await;
    // What went to descriptors 1 and 2 is printed output; what went to the cell's own
    // channel was not the answer the supervisor waited for, and was dropped.
    assert_eq!(out.value.as_deref(), Some("'real'"), "{out:?}");
    assert_eq!(sb.run("1 + 1").await.value.as_deref(), Some("2"));
}

#[tokio::test]
async fn tmp_is_private_and_bounded() {
    let cfg = SandboxConfig {
        max_disk_bytes: 8 << 20,
        max_files: 200,
        ..config()
    };
    let mut a = PythonSandbox::start(cfg.clone()).await.unwrap();
    let mut b = PythonSandbox::start(cfg).await.unwrap();
    if !a.isolation().private_tmp {
        skip("no mount namespace on this system: /tmp is shared between sandboxes");
        return;
    }
    a.run("open('/tmp/mine', 'w').write('a')").await;
    let out = b.run("import os\nos.path.exists('/tmp/mine')").await;
    assert_eq!(out.value.as_deref(), Some("False"), "{out:?}");
    // Bytes: the filesystem fills at its size, in /tmp and the working directory alike.
    let out = a
        .run("f = open('/tmp/big', 'wb')\nfor _ in range(64):\n    f.write(b'x' * (1 << 19))\nf.close()")
        .await;
    let error = out.error.unwrap_or_default();
    assert!(error.contains("No space left on device"), "{error}");
    a.run("import os\nos.remove('/tmp/big')").await;
    // Files: the count is bounded too.
    let out = a
        .run("for i in range(1000):\n    open(f'f{i}', 'w').close()")
        .await;
    let error = out.error.unwrap_or_default();
    assert!(error.contains("No space left on device"), "{error}");
    assert_eq!(b.run("1 + 1").await.value.as_deref(), Some("2"));
}

#[tokio::test]
async fn the_host_filesystem_is_read_only() {
    let mut sb = PythonSandbox::start(config()).await.unwrap();
    if !sb.isolation().read_only_host {
        skip(
            "no mount namespace on this system: the host's files are writable by the sandbox's user",
        );
        return;
    }
    let repo = env!("CARGO_MANIFEST_DIR");
    let out = sb
        .run(&format!("open('{repo}/pwned', 'w').write('x')"))
        .await;
    let error = out.error.unwrap_or_default();
    assert!(
        error.contains("Read-only file system") || error.contains("PermissionError"),
        "{error}"
    );
    assert!(!std::path::Path::new(&format!("{repo}/pwned")).exists());
    // The host's other world-writable places are the sandbox's own scratch space.
    for path in ["/var/tmp/pwned", "/dev/shm/pwned"] {
        let out = sb.run(&format!("open({path:?}, 'w').write('x')")).await;
        assert!(out.error.is_none(), "{out:?}");
        assert!(
            !std::path::Path::new(path).exists(),
            "{path} is on the host"
        );
    }
}

#[tokio::test]
async fn the_code_cannot_undo_its_isolation() {
    let mut sb = PythonSandbox::start(config()).await.unwrap();
    if !sb.isolation().private_tmp {
        skip("no mount namespace on this system: nothing to undo");
        return;
    }
    let out = sb
        .run(
            "import ctypes, subprocess\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             tried = [libc.umount2(b'/tmp', 2), libc.mount(None, b'/', None, 32 | 4096 | 16384, None)]\n\
             tried += [subprocess.run(['mount', '-o', 'remount,bind,rw', '/'], capture_output=True).returncode]\n\
             caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n\
             (tried, caps)",
        )
        .await;
    assert_eq!(
        out.value.as_deref(),
        Some("([-1, -1, 32], ['0000000000000000', '0000000000000000', '0000000000000000'])")
            .filter(|_| sb.isolation().dedicated_uid)
            .or(out.value.as_deref().filter(|v| v.starts_with(
                "([-1, -1, 32], ['0000000000000000', '0000000000000000', '0000000000000000'])"
            ))),
        "{out:?}"
    );
}

/// Runs this file's other tests as an unprivileged user (`nobody`), where isolation comes
/// from a user namespace instead of root.
#[test]
fn the_isolation_holds_for_an_unprivileged_user_too() {
    if std::env::var_os("AGENTFLY_LEASE_AS_USER").is_some() {
        return; // the child run itself
    }
    if std::env::var("AGENTFLY_SANDBOX_NAMESPACES").as_deref() == Ok("none") {
        skip("AGENTFLY_SANDBOX_NAMESPACES=none: namespaces are off by request");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        // Unprivileged already: the other tests ran as such.
        return;
    }
    let child = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--skip", "the_isolation_holds_for_an_unprivileged_user_too"])
        .arg("--nocapture")
        .env("AGENTFLY_LEASE_AS_USER", "1")
        .env("TMPDIR", "/tmp")
        .env("HOME", "/tmp")
        .current_dir("/tmp")
        .output()
        .expect("setpriv runs");
    let text = String::from_utf8_lossy(&child.stdout).into_owned()
        + &String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "as nobody:\n{text}");
    assert!(
        text.contains(" passed; 0 failed") && !text.contains("SKIPPED"),
        "as nobody:\n{text}"
    );
}
