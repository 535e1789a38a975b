//! A job's run directory: `settings.json` (everything that decides the results; a rerun
//! with other settings is refused rather than mixing two runs), `command.txt` (the command
//! that started it, for the report), and the stages' results, each written whole when its
//! stage finishes and read back instead of redoing the stage.

use crate::JobError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// An open run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    dir: PathBuf,
    command: String,
}

impl RunDir {
    /// Opens `dir` (created when absent; emptied first when `restart`) for a run with
    /// `settings`. The first run records them; a later run must bring the same ones, or it is
    /// refused with the settings that differ. Only an empty directory or a run of the same
    /// job (its `settings.json` names the same task) is ever emptied; anything else is
    /// refused, and nothing is removed.
    pub fn open<S>(dir: &Path, settings: &S, restart: bool) -> Result<Self, JobError>
    where
        S: Serialize + DeserializeOwned + PartialEq,
    {
        if restart && dir.exists() {
            if let Err(why) = restartable(dir, settings) {
                return Err(JobError::NotARun {
                    dir: dir.to_path_buf(),
                    why,
                });
            }
            std::fs::remove_dir_all(dir).map_err(JobError::io(dir))?;
        }
        std::fs::create_dir_all(dir).map_err(JobError::io(dir))?;
        // Absolute, so configurations written in subdirectories can name it.
        let dir = dir.canonicalize().map_err(JobError::io(dir))?;
        let settings_path = dir.join("settings.json");
        // Settings of another kind of run (a built-in job's, a task file's) do not read as
        // these: a run of another kind, not a corrupt file to delete.
        let earlier = read_json::<S>(&settings_path).map_err(|e| match e {
            JobError::Corrupt { message, .. } => JobError::OtherSettings {
                differences: format!("its settings.json is another kind of run's: {message}"),
                dir: dir.clone(),
            },
            e => e,
        })?;
        match earlier {
            Some(earlier) if earlier != *settings => {
                return Err(JobError::OtherSettings {
                    differences: differences(&earlier, settings).join(", "),
                    dir,
                });
            }
            Some(_) => {}
            None => write(&settings_path, &to_json(settings)?)?,
        }
        // The command that started the run, for its report (a resumed run keeps it).
        let command_path = dir.join("command.txt");
        let command = match std::fs::read_to_string(&command_path) {
            Ok(c) => c.trim().to_string(),
            Err(_) => {
                let c = std::env::args().collect::<Vec<_>>().join(" ");
                write(&command_path, &c)?;
                c
            }
        };
        Ok(Self { dir, command })
    }

    /// The directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A path inside the directory.
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.dir.join(rel)
    }

    /// The command line that started the run.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// Writes a file of the run whole.
    pub fn write(&self, rel: impl AsRef<Path>, text: &str) -> Result<(), JobError> {
        write(&self.path(rel), text)
    }

    /// A stage: its result from `rel` (JSON) when an earlier run finished it, else
    /// `compute`d (after printing `title`) and written there.
    pub fn stage<T>(
        &self,
        rel: impl AsRef<Path>,
        title: &str,
        compute: impl FnOnce() -> Result<T, JobError>,
    ) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned,
    {
        let path = self.path(rel);
        if let Some(done) = read_json(&path)? {
            return Ok(done);
        }
        eprintln!("{title}");
        let result = compute()?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(JobError::io(parent))?;
        }
        write(&path, &to_json(&result)?)?;
        Ok(result)
    }
}

/// Writes `text` to `path` whole (a temporary file, then a rename).
pub fn write(path: &Path, text: &str) -> Result<(), JobError> {
    agentfly_trainer::run::checkpoint::write_atomic(path, text).map_err(JobError::io(path))
}

/// `value` as pretty JSON.
pub fn to_json(value: &impl Serialize) -> Result<String, JobError> {
    serde_json::to_string_pretty(value).map_err(|e| JobError::State(format!("serializing: {e}")))
}

/// A JSON file's value, `None` when the file does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, JobError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| JobError::Corrupt {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(JobError::io(path)(e)),
    }
}

/// The values of a JSON Lines file (none when it does not exist).
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, JobError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(JobError::io(path)(e)),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| JobError::Corrupt {
                path: path.to_path_buf(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// Whether `dir` may be emptied for a run with `settings`: it is an empty directory, or
/// its `settings.json` is a run's (a JSON object) of the same job (the same `task`, absent
/// for the calculator; for a task file's run, the same `task.name`). Else why not.
fn restartable(dir: &Path, settings: &impl Serialize) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| e.to_string())?;
    if entries.next().is_none() {
        return Ok(());
    }
    let path = dir.join("settings.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("it holds files but no settings.json, so it is not a run's".into());
        }
        Err(e) => return Err(format!("its settings.json cannot be read: {e}")),
    };
    let Ok(serde_json::Value::Object(earlier)) = serde_json::from_str(&text) else {
        return Err("its settings.json is not a run's settings".into());
    };
    // A built-in job's task is its name (absent for the calculator; a table for the wiki's
    // formats); a task file's run is told apart by its `[agent]` table, and named by its
    // task's name.
    let task =
        |v: &serde_json::Map<String, serde_json::Value>| match (v.get("task"), v.get("agent")) {
            (Some(serde_json::Value::Object(t)), Some(_)) => {
                Some(serde_json::json!({ "task file": t.get("name") }))
            }
            (task, _) => task.cloned(),
        };
    let ours = match serde_json::to_value(settings) {
        Ok(serde_json::Value::Object(ours)) => ours,
        _ => return Err("the settings cannot be compared".into()),
    };
    if task(&earlier) != task(&ours) {
        return Err(format!(
            "it is a run of another job ({})",
            task(&earlier).map_or("calculator".to_string(), |t| t.to_string())
        ));
    }
    Ok(())
}

/// `key: old → new` for each setting that differs.
fn differences(a: &impl Serialize, b: &impl Serialize) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return vec!["?".into()];
    };
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} → {}", b.get(k).cloned().unwrap_or_default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Settings {
        algorithm: String,
        steps: usize,
    }

    fn settings(algorithm: &str) -> Settings {
        Settings {
            algorithm: algorithm.into(),
            steps: 10,
        }
    }

    #[test]
    fn a_rerun_with_other_settings_is_refused_naming_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        RunDir::open(&dir, &settings("grpo"), false).unwrap();
        RunDir::open(&dir, &settings("grpo"), false).unwrap();
        let err = RunDir::open(&dir, &settings("rloo"), false).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"(algorithm: "grpo" → "rloo"); pass --restart"#),
            "{err}"
        );
        // --restart starts over with the new settings.
        RunDir::open(&dir, &settings("rloo"), true).unwrap();
        RunDir::open(&dir, &settings("rloo"), false).unwrap();
    }

    #[test]
    fn restart_empties_only_a_run_of_the_same_job() {
        let tmp = tempfile::tempdir().unwrap();
        // A user's directory: refused, every file kept.
        let mine = tmp.path().join("mine");
        std::fs::create_dir_all(mine.join("sub")).unwrap();
        std::fs::write(mine.join("notes.txt"), "mine").unwrap();
        std::fs::write(mine.join("sub/more.txt"), "mine").unwrap();
        let err = RunDir::open(&mine, &settings("grpo"), true).unwrap_err();
        assert!(
            err.to_string().contains("no settings.json")
                && err.to_string().contains("nothing was removed"),
            "{err}"
        );
        assert!(mine.join("notes.txt").exists() && mine.join("sub/more.txt").exists());
        // A settings.json that is not a run's, or another job's run: refused too.
        std::fs::write(mine.join("settings.json"), "[1, 2]").unwrap();
        assert!(RunDir::open(&mine, &settings("grpo"), true).is_err());
        std::fs::write(mine.join("settings.json"), r#"{"task": "textworld"}"#).unwrap();
        let err = RunDir::open(&mine, &settings("grpo"), true).unwrap_err();
        assert!(err.to_string().contains("another job"), "{err}");
        assert!(mine.join("notes.txt").exists());
        // Another kind of run: a wiki format's, a task file's named like the job.
        for other in [
            r#"{"task": {"wiki-qa": "hermes"}}"#,
            r#"{"task": {"name": "calculator"}, "agent": {}}"#,
        ] {
            std::fs::write(mine.join("settings.json"), other).unwrap();
            let err = RunDir::open(&mine, &settings("grpo"), true).unwrap_err();
            assert!(err.to_string().contains("another job"), "{other}: {err}");
            // Without --restart: another run's settings, not a corrupt file to delete.
            let err = RunDir::open(&mine, &settings("grpo"), false).unwrap_err();
            assert!(
                err.to_string().contains("another kind of run's"),
                "{other}: {err}"
            );
        }
        assert!(mine.join("notes.txt").exists());
        // A file named as the directory: refused.
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(RunDir::open(&file, &settings("grpo"), true).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
        // An empty directory, or a run of this job: emptied.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        RunDir::open(&empty, &settings("grpo"), true).unwrap();
        let run = tmp.path().join("run");
        RunDir::open(&run, &settings("grpo"), false).unwrap();
        std::fs::write(run.join("stage.json"), "1").unwrap();
        RunDir::open(&run, &settings("rloo"), true).unwrap();
        assert!(!run.join("stage.json").exists());
    }

    #[test]
    fn a_finished_stage_is_read_back_not_redone() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::open(&tmp.path().join("run"), &settings("grpo"), false).unwrap();
        let first: Vec<u32> = run.stage("evals/a.json", "a", || Ok(vec![1, 2])).unwrap();
        let again: Vec<u32> = run.stage("evals/a.json", "a", || panic!("redone")).unwrap();
        assert_eq!(first, again);
        // A failing stage writes nothing; the next run does it.
        let failed: Result<Vec<u32>, _> =
            run.stage("evals/b.json", "b", || Err(JobError::State("no".into())));
        assert!(failed.is_err());
        assert!(!run.path("evals/b.json").exists());
        // A damaged result is an error that says how to redo the stage.
        std::fs::write(run.path("evals/a.json"), "{").unwrap();
        let err = run
            .stage::<Vec<u32>>("evals/a.json", "a", || Ok(vec![]))
            .unwrap_err();
        assert!(err.to_string().contains("delete it to redo"), "{err}");
    }

    #[test]
    fn json_lines_read_back_and_a_bad_line_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("v.jsonl");
        assert!(read_jsonl::<u32>(&path).unwrap().is_empty());
        std::fs::write(&path, "1\n\n2\n").unwrap();
        assert_eq!(read_jsonl::<u32>(&path).unwrap(), [1, 2]);
        std::fs::write(&path, "1\nx\n").unwrap();
        let err = read_jsonl::<u32>(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
