//! The OS side of a sandbox: what isolation this system allows, a uid per instance, and
//! killing everything an instance started.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::fs::{File, TryLockError};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// What a sandbox enforces beyond its resource limits, as its supervisor found it when it
/// started (not what was asked for: what holds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Isolation {
    /// The code runs as an unprivileged uid of its own (the host runs as root): it cannot
    /// signal the host or other instances, and `RLIMIT_NPROC` counts only its processes.
    pub dedicated_uid: bool,
    /// A network namespace with no interface but a loopback that is down: no socket
    /// reaches anything.
    pub network_namespace: bool,
    /// `/tmp` (also `/var/tmp` and `/dev/shm`) is a filesystem of the instance's own,
    /// bounded in bytes and files and made anew for every lease; the working directory is
    /// on it.
    pub private_tmp: bool,
    /// Every other mount of the host is read-only to the code (checkpoints, the repository,
    /// the user's files).
    pub read_only_host: bool,
    /// The kernel runs in a PID namespace of its own: it sees none of the host's processes,
    /// and all it started die with it.
    pub process_namespace: bool,
}

impl Isolation {
    /// Does everything hold that a sandbox can enforce on a system that allows it all?
    pub fn complete(&self) -> bool {
        self.dedicated_uid
            && self.network_namespace
            && self.private_tmp
            && self.read_only_host
            && self.process_namespace
    }

    /// One line for logs and reports: what holds and what does not.
    pub fn describe(&self) -> String {
        let yes = |b: bool| if b { "yes" } else { "NO" };
        format!(
            "network isolated {}, host files read-only {}, private bounded /tmp {}, \
             own PID namespace {}, own uid {}",
            yes(self.network_namespace),
            yes(self.read_only_host),
            yes(self.private_tmp),
            yes(self.process_namespace),
            yes(self.dedicated_uid),
        )
    }
}

/// How a sandbox's supervisor can be put into namespaces of its own on this system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Namespaces {
    /// As root: `unshare --net --mount --pid --fork`.
    Root,
    /// Not root, but unprivileged user namespaces work: `unshare --user --map-root-user
    /// --net --mount --pid --fork`.
    User,
    /// Neither: the sandbox runs in the host's namespaces.
    None,
}

impl Namespaces {
    /// Probes (once per process) what this system allows. `AGENTFLY_SANDBOX_NAMESPACES=none`
    /// says to use none (where `unshare` misbehaves; and to test what runs do without).
    pub(crate) fn probe() -> Namespaces {
        static PROBED: OnceLock<Namespaces> = OnceLock::new();
        *PROBED.get_or_init(|| {
            if std::env::var("AGENTFLY_SANDBOX_NAMESPACES").as_deref() == Ok("none") {
                return Namespaces::None;
            }
            let works = |args: &[&str]| {
                std::process::Command::new("unshare")
                    .args(args)
                    .arg("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let all = ["--net", "--mount", "--pid", "--fork", "--kill-child"];
            if nix::unistd::geteuid().is_root() && works(&all) {
                Namespaces::Root
            } else if works(&[&["--user", "--map-root-user"][..], &all].concat()) {
                Namespaces::User
            } else {
                Namespaces::None
            }
        })
    }

    /// `unshare`'s arguments before the program (empty for `None`): the supervisor is the
    /// first process of a PID namespace of its own (all the sandbox's processes die with
    /// it, and with `unshare`, which the host kills).
    pub(crate) fn unshare_args(self, network: bool) -> Vec<&'static str> {
        let mut args = match self {
            Namespaces::Root => vec![],
            Namespaces::User => vec!["--user", "--map-root-user"],
            Namespaces::None => return Vec::new(),
        };
        args.extend([
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--kill-child",
        ]);
        if network {
            args.push("--net");
        }
        args
    }
}

/// A uid reserved for one live sandbox: an exclusive lock on a file named after it, which
/// the OS releases if this process dies.
#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    _lock: File,
}

impl UidLease {
    /// Reserves a free uid of `range` (first number inclusive, second exclusive).
    pub fn reserve(range: (u32, u32)) -> std::io::Result<UidLease> {
        let dir = std::env::temp_dir().join("agentfly-sandbox-uids");
        std::fs::create_dir_all(&dir)?;
        // Go round the range rather than take the lowest free uid: processes a killed
        // sandbox left as zombies (until init reaps them) still count against its uid's
        // RLIMIT_NPROC, so a uid is best not reused at once. Start where this process's id
        // points, so parallel test binaries rarely contend for the same files.
        static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
        let span = range.1.saturating_sub(range.0).max(1);
        let _ = NEXT.compare_exchange(
            u32::MAX,
            std::process::id().wrapping_mul(7919) % span,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let start = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        for i in 0..span {
            let uid = range.0 + (start + i) % span;
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("{uid}.lock")))?;
            match file.try_lock() {
                Ok(()) => return Ok(UidLease { uid, _lock: file }),
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "all {span} sandbox uids of {}..{} are in use",
            range.0, range.1
        )))
    }

    /// Kills every process running as this uid (a sandbox's escaped children included).
    pub fn kill_all(&self) {
        for pid in processes_of(self.uid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Kills the process group `pgid` (the interpreter and the children it did not detach).
pub fn kill_group(pgid: u32) {
    if let Ok(pgid) = i32::try_from(pgid)
        && pgid > 1
    {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// The pids whose real uid is `uid`, from /proc.
fn processes_of(uid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let status = PathBuf::from(format!("/proc/{pid}/status"));
            std::fs::read_to_string(status).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|l| l.split_whitespace().next())
                    .and_then(|u| u.parse::<u32>().ok())
                    == Some(uid)
            })
        })
        .collect()
}
