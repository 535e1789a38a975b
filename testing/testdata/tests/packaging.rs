//! Every crate we mean to publish packages as it stands (`cargo package --workspace
//! --no-verify`: in dependency order, the path dependencies resolved to the sibling packages),
//! and each package holds the files its sources embed (`include_str!`, `include_bytes!`:
//! the Python sandbox's kernel, the world servers, the report's font), its README, and a
//! manifest with what crates.io shows (description, licence, readme, keywords, categories).
//! Verifying the packages (building each on its own) would be a second full build and is
//! left out.

use agentfly_testdata::{repo, workspace_members};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's members: package name, directory, and whether it is published (no
/// `publish = false`).
fn members() -> Vec<(String, PathBuf, bool)> {
    workspace_members()
        .iter()
        .map(|m| {
            let dir = repo().join(m);
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            let name = manifest
                .lines()
                .find_map(|l| l.strip_prefix("name = "))
                .expect("a package name")
                .trim_matches('"')
                .to_string();
            let published = !manifest.lines().any(|l| l.trim() == "publish = false");
            (name, dir, published)
        })
        .collect()
}

/// The files `dir`'s sources embed, relative to `dir`.
fn embedded(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("src")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for macro_ in ["include_str!(\"", "include_bytes!(\""] {
                for piece in text.split(macro_).skip(1) {
                    let rel = piece.split('"').next().unwrap();
                    let file = path.parent().unwrap().join(rel);
                    let file = file
                        .canonicalize()
                        .unwrap_or_else(|e| panic!("{} embeds {rel}: {e}", path.display()));
                    let inside = file
                        .strip_prefix(dir.canonicalize().unwrap())
                        .unwrap_or_else(|_| {
                            panic!(
                                "{} embeds {}, outside its crate",
                                path.display(),
                                file.display()
                            )
                        });
                    out.push(inside.to_string_lossy().into_owned());
                }
            }
        }
    }
    out
}

#[test]
fn every_published_crate_packages_with_the_files_it_embeds() {
    let members = members();
    let published: Vec<&(String, PathBuf, bool)> = members.iter().filter(|m| m.2).collect();
    assert!(published.len() >= 10, "{members:?}");
    // The scan finds what it must: the sandbox's kernel and the report's font.
    let all_embedded: Vec<String> = published.iter().flat_map(|m| embedded(&m.1)).collect();
    for known in ["src/python/kernel.py", "assets/DejaVuSans.ttf"] {
        assert!(all_embedded.iter().any(|f| f == known), "{all_embedded:?}");
    }
    let target = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(repo())
        .args(["package", "--workspace", "--no-verify", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", target.path());
    for (name, _, _) in members.iter().filter(|m| !m.2) {
        cmd.args(["--exclude", name]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "cargo package failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packages: Vec<PathBuf> = std::fs::read_dir(target.path().join("package"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "crate"))
        .collect();
    for (name, dir, _) in published {
        let file = packages
            .iter()
            .find(|p| {
                let stem = p.file_stem().unwrap().to_string_lossy();
                stem.strip_prefix(&format!("{name}-"))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            })
            .unwrap_or_else(|| panic!("{name} was not packaged: {packages:?}"));
        let listing = Command::new("tar").arg("tzf").arg(file).output().unwrap();
        assert!(listing.status.success(), "{}", file.display());
        let listing = String::from_utf8(listing.stdout).unwrap();
        let prefix = format!("{}/", file.file_stem().unwrap().to_string_lossy());
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for key in ["description", "license", "readme", "keywords", "categories"] {
            assert!(
                manifest.lines().any(|l| l.starts_with(&format!("{key} ")) || l.starts_with(&format!("{key}."))),
                "{name}'s manifest has no {key}"
            );
        }
        let mut needed = embedded(dir);
        needed.extend(["Cargo.toml".into(), "README.md".into()]);
        for needed in needed {
            assert!(
                listing.lines().any(|l| l == format!("{prefix}{needed}")),
                "{name}'s package lacks {needed}"
            );
        }
    }
}
