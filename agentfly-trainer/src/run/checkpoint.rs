//! Checkpoints: the policy in Hugging Face layout, the optimizer's state, and the run's
//! position, written to a temporary directory and renamed into place, so a crash leaves
//! either the previous checkpoint or the new one, never half of one.

use crate::train::{Critic, OptimConfig, ValueHead};
use agentfly_model::model::Decoder;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where a run is, besides its weights and optimizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Updates done.
    pub step: usize,
    /// Samples drawn from the training set so far.
    pub cursor: u64,
    /// The supervised warm start is done.
    #[serde(default)]
    pub sft_done: bool,
    /// The optimizer state is keyed by parameter ids: the ids of the policy's parameters
    /// in traversal order, given back to the reloaded policy.
    pub param_ids: Vec<u64>,
}

struct Ids(Vec<u64>);

impl ModuleVisitor for Ids {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.id.val());
    }
}

struct SetIds<I>(I);

impl<I: Iterator<Item = u64>> ModuleMapper for SetIds<I> {
    fn map_float<const D: usize>(&mut self, mut param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if let Some(id) = self.0.next() {
            param.id = ParamId::from(id);
        }
        param
    }
}

/// The ids of `decoder`'s parameters in traversal order.
pub fn param_ids(decoder: &Decoder) -> Vec<u64> {
    let mut ids = Ids(Vec::new());
    decoder.visit(&mut ids);
    ids.0
}

/// `decoder` with its parameters' ids set to `ids` (in traversal order).
pub fn with_param_ids(decoder: Decoder, ids: &[u64]) -> Decoder {
    decoder.map(&mut SetIds(ids.iter().copied()))
}

/// The checkpoint directory of `step`.
pub fn step_dir(root: &Path, step: usize) -> PathBuf {
    root.join(format!("step-{step:06}"))
}

/// The latest complete checkpoint under `root`, if any (after [`recover`]ing it from an
/// interrupted replacement).
pub fn latest(root: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(root.join("latest")).ok()?;
    let dir = root.join(name.trim());
    recover(&dir).ok()?;
    dir.join("state.json").exists().then_some(dir)
}

/// Writes `text` to `path` through a temporary file and a rename, the file and then its
/// directory synced: after a crash the path holds the old text or the new, whole.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Syncs a directory: the names it holds (a rename into it, a file created) are on disk.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)?.sync_all()?;
    synced(dir);
    Ok(())
}

/// Syncs every file under `dir`, then every directory, `dir` last.
pub fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            sync_tree(&entry.path())?;
        } else if kind.is_file() {
            std::fs::File::open(entry.path())?.sync_all()?;
            synced(&entry.path());
        }
    }
    sync_dir(dir)
}

#[cfg(test)]
thread_local! {
    /// The paths synced on this thread, for the tests.
    static SYNCED: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn synced(_path: &Path) {
    #[cfg(test)]
    SYNCED.with(|s| s.borrow_mut().push(_path.to_path_buf()));
}

/// Where [`replace_dir`] keeps the previous `dir` while the new one moves in.
fn previous(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!(".{name}.previous"))
}

/// The prefix of [`replace_dir`]'s temporary directories for `dir`.
fn incomplete_prefix(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    format!(".incomplete-{name}-")
}

/// Finishes or undoes a [`replace_dir`] of `dir` that a crash interrupted: when `dir` is
/// missing and its previous version is kept aside, that version comes back; a kept-aside
/// version beside a present `dir` (the swap completed) and unfinished temporary directories
/// are removed. Nothing to do is the usual case.
pub fn recover(dir: &Path) -> std::io::Result<()> {
    let old = previous(dir);
    let parent = dir.parent().unwrap_or(Path::new("."));
    if old.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(&old)?;
        } else {
            std::fs::rename(&old, dir)?;
            sync_dir(parent)?;
        }
    }
    let prefix = incomplete_prefix(dir);
    if let Ok(entries) = std::fs::read_dir(parent) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                std::fs::remove_dir_all(entry.path())?;
            }
        }
    }
    Ok(())
}

/// The steps of [`replace_dir`], in order; a test stops after any of them, as a crash
/// would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Swap {
    /// The new contents are in a temporary directory beside `dir`.
    Filled,
    /// The old `dir` is kept aside.
    OldAside,
    /// The new contents are `dir`.
    NewInPlace,
    /// The old contents are gone.
    Done,
}

/// Fills a fresh temporary directory beside `dir` with `fill`, then puts it in `dir`'s place
/// (replacing an older one) by two renames: the old `dir` aside, the new one in. A crash at
/// any point leaves the old directory or the new one (in place, or aside where [`recover`],
/// which every replacement runs first, brings it back), never neither.
pub fn replace_dir(
    dir: &Path,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    replace_dir_until(dir, fill, Swap::Done)
}

fn replace_dir_until(
    dir: &Path,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
    until: Swap,
) -> std::io::Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    recover(dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(&incomplete_prefix(dir))
        .tempdir_in(parent)?;
    fill(tmp.path())?;
    // Every file written and the directory itself on disk before any rename: a crash
    // after the swap must find whole files, not the names of empty ones.
    sync_tree(tmp.path())?;
    // From here on a crash must not delete the new contents: they are no longer temporary.
    let tmp = tmp.keep();
    if until == Swap::Filled {
        return Ok(());
    }
    let old = previous(dir);
    let had_old = dir.exists();
    if had_old {
        std::fs::rename(dir, &old)?;
        sync_dir(parent)?;
    }
    if until == Swap::OldAside {
        return Ok(());
    }
    std::fs::rename(&tmp, dir)?;
    sync_dir(parent)?;
    if until == Swap::NewInPlace {
        return Ok(());
    }
    if had_old {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

/// Fills a fresh temporary directory under `root` with `fill`, renames it to `final_dir`
/// (replacing an older one), and points `root/latest` at it; keeps the `keep` newest
/// `step-*` directories.
pub fn commit(
    root: &Path,
    final_dir: &Path,
    keep: usize,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    replace_dir(final_dir, fill)?;
    let name = final_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic(&root.join("latest"), &name)?;
    let mut steps: Vec<PathBuf> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        })
        .collect();
    steps.sort();
    let excess = steps.len().saturating_sub(keep.max(1));
    for old in &steps[..excess] {
        if old != final_dir {
            let _ = std::fs::remove_dir_all(old);
        }
    }
    Ok(())
}

/// Writes the critic's head (`critic.json`, with its parameter ids) and its optimizer.
pub fn save_critic(
    dir: &Path,
    head: &ValueHead,
    optimizer: &burn::optim::ModuleOptimizer,
) -> Result<(), String> {
    let (weight, bias) = head.values();
    let text = serde_json::json!({
        "weight": weight,
        "bias": bias,
        "ids": [head.weight.id.val(), head.bias.id.val()],
    });
    std::fs::write(dir.join("critic.json"), text.to_string()).map_err(|e| e.to_string())?;
    optimizer
        .save(dir.join("critic_optimizer.bpk"))
        .map_err(|e| format!("critic optimizer: {e:?}"))
}

/// Reads what [`save_critic`] wrote.
pub fn load_critic(dir: &Path, optim: &OptimConfig, device: &Device) -> Result<Critic, String> {
    let text = std::fs::read_to_string(dir.join("critic.json")).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let weight: Vec<f32> =
        serde_json::from_value(v["weight"].clone()).map_err(|e| e.to_string())?;
    let bias = v["bias"].as_f64().ok_or("critic.json has no bias")? as f32;
    let ids: Vec<u64> = serde_json::from_value(v["ids"].clone()).map_err(|e| e.to_string())?;
    let mut head = ValueHead::from_values(weight, bias, device);
    if let [w, b] = ids[..] {
        head.weight.id = ParamId::from(w);
        head.bias.id = ParamId::from(b);
    }
    let saved = optim
        .init()
        .load(dir.join("critic_optimizer.bpk"))
        .map_err(|e| format!("critic optimizer: {e:?}"))?;
    Ok(Critic::new(head, optim, Some(saved)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_directory_is_synced_file_by_file_before_it_moves_in() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("step-000001");
        SYNCED.with(|s| s.borrow_mut().clear());
        replace_dir(&dir, |tmp| {
            std::fs::create_dir(tmp.join("model"))?;
            std::fs::write(tmp.join("model/weights"), "w")?;
            std::fs::write(tmp.join("state.json"), "{}")
        })
        .unwrap();
        write_atomic(&root.path().join("latest"), "step-000001").unwrap();
        let synced = SYNCED.with(|s| s.borrow().clone());
        let names: Vec<String> = synced
            .iter()
            .map(|p| {
                p.strip_prefix(root.path())
                    .map(|r| r.display().to_string())
                    .unwrap_or_default()
            })
            .map(|n| {
                n.split_once('/').map_or(n.clone(), |(first, rest)| {
                    // The temporary directory's random name, as its kind.
                    if first.starts_with(".incomplete-") {
                        format!("tmp/{rest}")
                    } else {
                        n.clone()
                    }
                })
            })
            .collect();
        // Files, then their directories, then the temporary directory; then the parent
        // after the rename; then the pointer's directory.
        for want in ["tmp/model/weights", "tmp/model", "tmp/state.json", ""] {
            assert!(names.iter().any(|n| n == want), "{want:?} not in {names:?}");
        }
        let weights = names.iter().position(|n| n == "tmp/model/weights").unwrap();
        let model = names.iter().position(|n| n == "tmp/model").unwrap();
        let parent = names.iter().position(|n| n.is_empty()).unwrap();
        assert!(weights < model && model < parent, "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some(""), "{names:?}");
    }

    fn contents(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join("file")).ok()
    }

    fn write(text: &'static str) -> impl FnOnce(&Path) -> std::io::Result<()> {
        move |tmp| std::fs::write(tmp.join("file"), text)
    }

    #[test]
    fn a_crash_at_any_point_of_a_replacement_leaves_the_old_or_the_new_directory() {
        for until in [Swap::Filled, Swap::OldAside, Swap::NewInPlace, Swap::Done] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("model");
            replace_dir(&dir, write("old")).unwrap();
            replace_dir_until(&dir, write("new"), until).unwrap();
            // The process died here; the next run recovers first.
            recover(&dir).unwrap();
            let expected = if until >= Swap::NewInPlace {
                "new"
            } else {
                "old"
            };
            assert_eq!(contents(&dir).as_deref(), Some(expected), "{until:?}");
            let left: Vec<_> = std::fs::read_dir(root.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left, ["model"], "{until:?}: nothing else is left");
            // And the next replacement works.
            replace_dir(&dir, write("next")).unwrap();
            assert_eq!(contents(&dir).as_deref(), Some("next"));
        }
    }

    #[test]
    fn a_failed_fill_leaves_the_old_directory_and_no_temporary_one() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("model");
        replace_dir(&dir, write("old")).unwrap();
        let err = replace_dir(&dir, |_| Err(std::io::Error::other("disk full"))).unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(contents(&dir).as_deref(), Some("old"));
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
    }

    #[test]
    fn the_latest_checkpoint_survives_a_crash_in_its_rewrite() {
        let root = tempfile::tempdir().unwrap();
        let step = step_dir(root.path(), 3);
        commit(root.path(), &step, 2, |tmp| {
            std::fs::write(tmp.join("state.json"), "{}")
        })
        .unwrap();
        // Rewriting the same step dies with the old version aside.
        replace_dir_until(
            &step,
            |tmp| std::fs::write(tmp.join("state.json"), "{}"),
            Swap::OldAside,
        )
        .unwrap();
        assert!(!step.exists());
        assert_eq!(latest(root.path()), Some(step));
    }
}
