//! The OS side of a sandbox: what isolation this system allows, a uid per instance, and
//! killing everything an instance started.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::fs::{File, TryLockError};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// What this system lets a sandbox enforce, probed once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Isolation {
    /// The host runs as root, so a sandbox can get a uid of its own (private working
    /// directory, exact process limit, its processes killable as a group).
    pub root: bool,
    /// `unshare --net` works: sandboxes see no network interface but a loopback that is
    /// down.
    pub network_namespace: bool,
}

impl Isolation {
    /// Probes (once) what this system allows.
    pub fn probe() -> Isolation {
        static PROBED: OnceLock<Isolation> = OnceLock::new();
        *PROBED.get_or_init(|| Isolation {
            root: nix::unistd::geteuid().is_root(),
            network_namespace: std::process::Command::new("unshare")
                .args(["--net", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        })
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
