//! PythonSandbox: notebook behaviour, and hostile code — each snippet ends with a clear
//! output, the host unharmed, and the next call working.
//!
//! Isolation that needs root (a uid per instance) or network namespaces is asserted when
//! the system provides it; otherwise the test says what it skipped — and fails where
//! `AGENTFLY_REQUIRE_ISOLATION=1` or `AGENTFLY_NO_SKIP=1`, as CI (which runs as root) sets.

use agentfly_envs::{PythonSandbox, SandboxConfig};
use std::time::Duration;

fn config() -> SandboxConfig {
    SandboxConfig {
        call_timeout: Duration::from_secs(3),
        cpu_seconds_per_call: 2,
        memory_bytes: 512 << 20,
        max_processes: 32,
        max_file_bytes: 1 << 20,
        max_output_chars: 2000,
        ..SandboxConfig::default()
    }
}

async fn sandbox() -> PythonSandbox {
    PythonSandbox::start(config())
        .await
        .expect("python3 starts")
}

/// Counts the live (not zombie) processes of the sandbox's uid.
const COUNT_LIVE_PROCESSES: &str = r#"import os
def live(p):
    try:
        s = open(f'/proc/{p}/stat').read()
        return os.stat(f'/proc/{p}').st_uid == os.getuid() and s.rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False
sum(1 for p in os.listdir('/proc') if p.isdigit() and live(p))"#;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

use agentfly_testdata::skip;

/// The sandbox still works and kept (or lost) `marker`.
async fn still_works(sb: &mut PythonSandbox) {
    let out = sb.run("1 + 1").await;
    assert_eq!(out.value.as_deref(), Some("2"), "{out:?}");
    assert!(out.error.is_none());
}

#[tokio::test]
async fn a_notebook_cell_shows_output_value_and_errors() {
    let mut sb = sandbox().await;
    let out = sb.run("x = 6 * 7\nprint('hello')\nx").await;
    assert_eq!(
        (out.stdout.as_str(), out.value.as_deref()),
        ("hello\n", Some("42"))
    );
    assert_eq!(out.render(), "hello\n42");
    // State persists; a trailing None shows nothing; stderr is separate.
    let out = sb
        .run("import sys\nprint('warn', file=sys.stderr)\ny = x + 1\nNone")
        .await;
    assert_eq!(
        (out.stderr.as_str(), out.value.as_deref()),
        ("warn\n", None)
    );
    assert_eq!(out.render(), "[stderr]\nwarn");
    assert_eq!(sb.run("y").await.value.as_deref(), Some("43"));
    // An exception: traceback with the line of the cell, variables kept.
    let out = sb.run("z = 1\n1 / 0").await;
    let error = out.error.as_deref().unwrap();
    assert!(
        error.starts_with("Traceback (most recent call last):\n  File \"<cell>\", line 2"),
        "{error}"
    );
    assert!(
        error.contains("    1 / 0") && error.ends_with("ZeroDivisionError: division by zero\n"),
        "{error}"
    );
    assert!(
        !error.contains("kernel"),
        "kernel frames are hidden: {error}"
    );
    assert_eq!(sb.run("z").await.value.as_deref(), Some("1"));
    let out = sb.run("def f(:\n  pass").await;
    assert!(
        out.error.as_deref().unwrap().contains("SyntaxError"),
        "{out:?}"
    );
    // Subprocess output is captured too; exit() is an error, not the end of the kernel.
    let out = sb
        .run("import subprocess\nsubprocess.run(['echo', 'from a child'])\n")
        .await;
    assert_eq!(out.stdout, "from a child\n");
    let out = sb.run("exit(3)").await;
    assert!(
        out.error
            .as_deref()
            .is_some_and(|e| e.contains("SystemExit: 3")),
        "{out:?}"
    );
    assert_eq!(sb.run("x").await.value.as_deref(), Some("42"));
    // The L0 notepad is there.
    let out = sb
        .run("notepad.add_todo('add'); notepad.add_fact('2+2=4'); print(notepad)")
        .await;
    assert!(
        out.stdout.contains("[ ] 0. add") && out.stdout.contains("- 2+2=4"),
        "{out:?}"
    );
    assert_eq!(sb.run("").await.render(), "(no output)");
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_and_the_interpreter_restarted() {
    let mut sb = PythonSandbox::start(SandboxConfig {
        call_timeout: Duration::from_millis(800),
        ..config()
    })
    .await
    .unwrap();
    sb.run("kept = 1\nopen('file.txt', 'w').write('still here')")
        .await;
    let out = sb.run("while True:\n    pass").await;
    assert!(out.timed_out && out.restarted, "{out:?}");
    assert_eq!(
        out.error.as_deref(),
        Some(
            "Execution timed out after 1 s and was stopped. The interpreter was restarted: \
             variables defined before are lost; files in the working directory are kept."
        )
    );
    let out = sb.run("kept").await;
    assert!(
        out.error.unwrap().contains("NameError"),
        "variables are gone"
    );
    assert_eq!(
        sb.run("open('file.txt').read()").await.value.as_deref(),
        Some("'still here'")
    );
    assert_eq!(sb.stats().1, 1, "one restart");
}

#[tokio::test]
async fn cpu_time_is_limited_per_call() {
    let mut sb = PythonSandbox::start(SandboxConfig {
        call_timeout: Duration::from_secs(20),
        cpu_seconds_per_call: 1,
        ..config()
    })
    .await
    .unwrap();
    sb.run("kept = 'yes'").await;
    let out = sb.run("n = 0\nwhile True:\n    n += 1").await;
    let error = out.error.unwrap();
    assert!(
        error.contains("CpuTimeLimit: CPU time limit of 1 s exceeded"),
        "{error}"
    );
    assert!(!out.restarted && out.wall_seconds < 10.0);
    // The next call gets its own second, and the state survived.
    assert_eq!(sb.run("kept").await.value.as_deref(), Some("'yes'"));
    let out = sb.run("sum(range(10**6))").await;
    assert_eq!(out.value.as_deref(), Some("499999500000"));
}

#[tokio::test]
async fn a_memory_bomb_gets_a_memory_error() {
    let mut sb = sandbox().await;
    let out = sb.run("x = bytearray(8 * 1024**3)").await;
    assert!(out.error.unwrap().ends_with("MemoryError\n"));
    let out = sb
        .run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))")
        .await;
    assert!(out.error.unwrap().contains("MemoryError"));
    sb.run("del chunks").await;
    still_works(&mut sb).await;
}

#[tokio::test]
async fn a_fork_bomb_is_contained() {
    let mut sb = sandbox().await;
    let out = sb
        .run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
        .await;
    assert!(out.error.is_some(), "{out:?}");
    still_works(&mut sb).await;
    if sb.isolation().dedicated_uid {
        // Every process the bomb made is gone: only the kernel runs as the sandbox's uid.
        let out = sb.run(COUNT_LIVE_PROCESSES).await;
        assert_eq!(out.value.as_deref(), Some("1"), "{out:?}");
    } else {
        skip("not root: that the fork bomb's processes are all gone is not asserted");
    }
}

#[tokio::test]
async fn files_outside_the_working_directory_are_out_of_reach() {
    let mut a = sandbox().await;
    let mut b = sandbox().await;
    // Inside the working directory: fine, with relative and absolute paths.
    let out = a
        .run("open('secret.txt', 'w').write('a-secret')\nimport os\nos.getcwd()")
        .await;
    let cwd = out.value.unwrap();
    assert_eq!(cwd.trim_matches('\''), a.workdir().to_str().unwrap());
    if !is_root() {
        skip("not root: the sandbox runs as this user, file isolation not asserted");
        return;
    }
    assert!(a.isolation().dedicated_uid && b.isolation().dedicated_uid);
    let repo = env!("CARGO_MANIFEST_DIR");
    for path in [
        "/etc/agentfly-pwned",
        "/root/pwned",
        &format!("{repo}/pwned"),
        "/usr/pwned",
    ] {
        let out = a.run(&format!("open({path:?}, 'w').write('x')")).await;
        let error = out.error.unwrap_or_default();
        assert!(
            error.contains("PermissionError") || error.contains("Read-only file system"),
            "{path}: {error}"
        );
        assert!(!std::path::Path::new(path).exists());
    }
    // Another instance's files: not readable (on a private /tmp, not even there), not
    // listable.
    let theirs = a.workdir().join("secret.txt");
    let out = b
        .run(&format!("open({:?}).read()", theirs.to_str().unwrap()))
        .await;
    let error = out.error.unwrap_or_default();
    assert!(
        error.contains("PermissionError") || error.contains("FileNotFoundError"),
        "{error}"
    );
    let out = b
        .run(&format!(
            "import os\nos.listdir({:?})",
            a.workdir().to_str().unwrap()
        ))
        .await;
    assert_ne!(out.value.as_deref(), Some("['secret.txt']"), "{out:?}");
    still_works(&mut b).await;
}

#[tokio::test]
async fn no_socket_reaches_anything() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut sb = sandbox().await;
    if !sb.isolation().network_namespace {
        skip("no network namespace on this system: network isolation not asserted");
        return;
    }
    for target in [
        format!("('127.0.0.1', {port})"),
        "('1.1.1.1', 53)".to_string(),
    ] {
        let out = sb
            .run(&format!(
                "import socket\nsocket.create_connection({target}, timeout=1)"
            ))
            .await;
        let error = out.error.unwrap_or_default();
        assert!(
            error.contains("Network is unreachable") || error.contains("Connection refused"),
            "{target}: {error}"
        );
    }
    assert!(listener.accept().is_err(), "nothing connected to the host");
    let out = sb
        .run("import socket\nsocket.gethostbyname('example.com')")
        .await;
    assert!(out.error.unwrap().contains("gaierror"));
    still_works(&mut sb).await;
}

#[tokio::test]
async fn the_parent_and_the_host_cannot_be_signalled() {
    let mut sb = sandbox().await;
    if !sb.isolation().dedicated_uid {
        skip("not root: the sandbox runs as this user and could signal the host; not run");
        return;
    }
    let host = std::process::id();
    let out = sb
        .run(&format!(
            "import os, signal\nos.kill({host}, signal.SIGKILL)"
        ))
        .await;
    // Not allowed; in a PID namespace of its own, not even there.
    let error = out.error.unwrap_or_default();
    assert!(
        error.contains("PermissionError") || error.contains("ProcessLookupError"),
        "{error}"
    );
    let out = sb
        .run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
        .await;
    assert!(out.error.is_some());
    // kill(-1) reaches only the sandbox's own processes.
    let out = sb
        .run("import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    pass\n'alive'")
        .await;
    assert_eq!(out.value.as_deref(), Some("'alive'"), "{out:?}");
    still_works(&mut sb).await;
}

#[tokio::test]
async fn a_process_that_kills_itself_is_restarted() {
    let mut sb = sandbox().await;
    let out = sb.run("import os\nos.kill(os.getpid(), 9)").await;
    let error = out.error.unwrap();
    assert!(
        error.starts_with("The Python process died: the interpreter exited (signal: 9"),
        "{error}"
    );
    assert!(out.restarted);
    still_works(&mut sb).await;
    let out = sb.run("import os\nos._exit(0)").await;
    assert!(out.restarted);
    still_works(&mut sb).await;
}

#[tokio::test]
async fn huge_output_is_capped_with_a_marker() {
    let mut sb = sandbox().await;
    let out = sb.run("print('x' * 100_000)").await;
    assert!(out.truncated);
    assert!(out.stdout.starts_with(&"x".repeat(2000)));
    assert!(
        out.stdout
            .ends_with("\n…[output truncated: 98001 more bytes]"),
        "{}",
        &out.stdout[1990..]
    );
    // Endless printing stops at the file-size limit (1 MiB here) with an error.
    let out = sb.run("while True:\n    print('y' * 1000)").await;
    assert!(out.truncated && out.error.unwrap().contains("File too large"));
    let out = sb.run("list(range(100_000))").await;
    assert!(out.truncated && out.value.unwrap().ends_with(" more bytes]"));
    still_works(&mut sb).await;
}

#[tokio::test]
async fn reset_clears_variables_files_and_processes() {
    use agentfly_core::env::Env;
    let mut sb = sandbox().await;
    sb.run("v = 5\nopen('f.txt', 'w').write('x')\nimport os\nos.mkdir('d')\nimport subprocess\np = subprocess.Popen(['sleep', '60'])").await;
    sb.reset(None).await.unwrap();
    assert!(sb.run("v").await.error.unwrap().contains("NameError"));
    assert_eq!(
        sb.run("import os\nsorted(os.listdir('.'))")
            .await
            .value
            .as_deref(),
        Some("[]")
    );
    sb.health_check().await.unwrap();
    if sb.isolation().dedicated_uid {
        let out = sb.run(COUNT_LIVE_PROCESSES).await;
        assert_eq!(out.value.as_deref(), Some("1"), "the sleep was killed");
    } else {
        skip("not root: that the timed-out call's processes are gone is not asserted");
    }
}

#[tokio::test]
async fn a_cancelled_call_does_not_confuse_the_next_one() {
    let mut sb = sandbox().await;
    // The caller gives up while the code still runs (a tool timeout above the sandbox's).
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        sb.run("import time\ntime.sleep(1)\n'late'"),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(sb.run("'next'").await.value.as_deref(), Some("'next'"));
}

#[tokio::test]
async fn a_dropped_sandbox_leaves_nothing_behind() {
    let mut sb = sandbox().await;
    let out = sb
        .run("import subprocess\np = subprocess.Popen(['sleep', '60'])\nopen('f', 'w').write('x')")
        .await;
    assert!(out.error.is_none(), "{out:?}");
    let pid = sb.pid().unwrap();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    assert!(!children.trim().is_empty(), "the supervisor has its kernel");
    drop(sb);
    // The supervisor and every process under it are gone (or dead, waiting to be reaped).
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    let watched: Vec<String> = std::iter::once(pid.to_string())
        .chain(children.split_whitespace().map(str::to_string))
        .collect();
    for _ in 0..200 {
        if !watched.iter().any(|p| alive(p)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!watched.iter().any(|p| alive(p)), "{watched:?} still run");
}

#[test]
fn a_skipped_isolation_check_fails_under_the_switch() {
    // In a child run of this very test, `skip` is called: it must pass without the switch
    // and fail with it (CI sets it, and runs as root where nothing is skipped).
    if std::env::var_os("AGENTFLY_SKIP_PROBE").is_some() {
        skip("probe");
        return;
    }
    let child = |switch: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "a_skipped_isolation_check_fails_under_the_switch",
            "--exact",
        ])
        .env("AGENTFLY_SKIP_PROBE", "1")
        .env_remove("AGENTFLY_REQUIRE_ISOLATION")
        .env_remove("AGENTFLY_NO_SKIP");
        if let Some(switch) = switch {
            cmd.env(switch, "1");
        }
        cmd.output().unwrap().status.success()
    };
    assert!(child(None), "without the switch a skip passes, saying so");
    assert!(!child(Some("AGENTFLY_REQUIRE_ISOLATION")));
    assert!(!child(Some("AGENTFLY_NO_SKIP")));
}
