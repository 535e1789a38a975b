//! The repository's layout rules, checked on its own sources: every crate at the top level
//! (test-only crates under `testing/`), the model, engine and trainer crates depending one
//! way with none over 40% of the code, no source file over 600 lines (test modules not
//! counted), no module that imports from a module that imports it back (re-exports
//! followed to where an item is defined), and no code that reads the shared folder beside
//! the repository (a clone tests itself).

use agentfly_testdata::{repo, workspace_members as members};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of a file up to its test module.
fn non_test(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// Code without comments, string and char literals (their contents blanked).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if b[i] == b'r'
            && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            i = text[start..]
                .find(&close)
                .map_or(b.len(), |e| start + e + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
            out.push_str("' '");
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            let end = text[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
            i = end;
            out.push_str("' '");
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The paths a use tree names, each as segments with the name it is known by
/// (`a::{b, c::d as e}` → `a::b` as `b`, `a::c::d` as `e`).
fn expand(tree: &str) -> Vec<(Vec<String>, String)> {
    // `x as y` → `x@y`, then no white space.
    let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.replace(" as ", "@").replace(' ', "");
    fn go(prefix: &[String], s: &str, out: &mut Vec<(Vec<String>, String)>) {
        let (head, rest) = match s.find('{') {
            Some(i) => (&s[..i], Some(&s[i + 1..s.len() - 1])),
            None => (s, None),
        };
        let mut path = prefix.to_vec();
        let mut alias = None;
        for segment in head.split("::").filter(|p| !p.is_empty()) {
            let (name, known_as) = segment.split_once('@').unwrap_or((segment, segment));
            path.push(name.to_string());
            alias = Some(known_as.to_string());
        }
        let Some(rest) = rest else {
            let name = alias.unwrap_or_default();
            out.push((path, name));
            return;
        };
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    go(&path, &rest[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if start < rest.len() {
            go(&path, &rest[start..], out);
        }
    }
    let mut out = Vec::new();
    go(&[], &tree, &mut out);
    out
}

#[derive(Debug, PartialEq)]
struct Use {
    public: bool,
    path: Vec<String>,
    name: String,
}

struct Module {
    /// Paths named by `use` (with whether it is `pub`, and the name it brings) and inline
    /// `crate::` / `super::` / `self::` paths.
    uses: Vec<Use>,
}

/// The modules of one crate, by path (`""` is the root).
fn modules(src: &Path) -> BTreeMap<Vec<String>, Module> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        if rel.starts_with("bin") {
            continue;
        }
        let mut path: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            path.pop();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = code_only(non_test(&text));
        let mut uses = Vec::new();
        let mut rest = code.as_str();
        let mut in_use = Vec::new();
        // `use` statements.
        for (i, _) in code.match_indices("use ") {
            let before = &code[..i];
            let boundary = before
                .trim_end()
                .chars()
                .last()
                .is_none_or(|c| matches!(c, ';' | '}' | '{' | ')' | ']'))
                || before.trim_end().ends_with("pub")
                || before.trim_end().ends_with("pub(crate)")
                || before.trim_end().ends_with("pub(super)");
            if !boundary {
                continue;
            }
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            let public = before.trim_end().ends_with("pub");
            for (path, name) in expand(&code[i + 4..end]) {
                uses.push(Use { public, path, name });
            }
            in_use.push(i..end);
        }
        // Inline paths.
        while let Some(i) = ["crate::", "super::", "self::"]
            .iter()
            .filter_map(|k| rest.find(k))
            .min()
        {
            let offset = code.len() - rest.len() + i;
            let prev = code[..offset].chars().last();
            let word: String = rest[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if !prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                && !in_use.iter().any(|r| r.contains(&offset))
            {
                let segments: Vec<String> = word
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let name = segments.last().cloned().unwrap_or_default();
                uses.push(Use {
                    public: false,
                    path: segments,
                    name,
                });
            }
            rest = &rest[i + word.len().max(1)..];
        }
        out.insert(path, Module { uses });
    }
    out
}

/// `segments`, as written in the module `from`, as an absolute path; `None` for another
/// crate's path or a name in scope.
fn absolute(from: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// Where an absolute path leads: the module defining the item, following re-exports.
fn resolve(
    mods: &BTreeMap<Vec<String>, Module>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
    path: &[String],
    depth: usize,
) -> Option<Vec<String>> {
    let module = (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| mods.contains_key(p))?;
    if depth < 8
        && let Some(item) = path.get(module.len())
        && let Some(target) = reexports.get(&(module.clone(), item.clone()))
    {
        return resolve(mods, reexports, target, depth + 1).or(Some(module));
    }
    Some(module)
}

#[test]
fn crates_sit_at_the_top_level() {
    assert!(
        !repo().join("crates").exists(),
        "crates/ should be gone: crates sit at the top level"
    );
    for member in members() {
        let depth = Path::new(&member).components().count();
        assert!(
            depth == 1 || member.starts_with("testing/"),
            "{member}: a crate sits at the top level (test-only crates under testing/)"
        );
        assert!(repo().join(&member).join("Cargo.toml").exists(), "{member}");
    }
}

#[test]
fn no_source_file_is_over_600_lines() {
    let mut long = Vec::new();
    for member in members() {
        let mut files = Vec::new();
        rust_files(&repo().join(&member).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines = non_test(&text).lines().count();
            if lines > 600 {
                long.push(format!("{} ({lines} lines)", file.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these by concern: {long:#?}");
}

/// Pairs of modules of the crate in `src` that import from each other.
fn cycles(src: &Path) -> Vec<String> {
    let mods = modules(src);
    // `pub use` items: (module, name) → the path they name.
    let mut reexports = BTreeMap::new();
    for (path, m) in &mods {
        for u in m.uses.iter().filter(|u| u.public && !u.path.is_empty()) {
            let mut full = u.path.clone();
            if !matches!(full[0].as_str(), "crate" | "super" | "self") {
                full.insert(0, "self".into());
            }
            if let Some(abs) = absolute(path, &full) {
                reexports.insert((path.clone(), u.name.clone()), abs);
            }
        }
    }
    let mut edges: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, m) in &mods {
        for u in &m.uses {
            let mut full = u.path.clone();
            // A use tree's first segment may be a child module declared here.
            if !full.is_empty()
                && !matches!(full[0].as_str(), "crate" | "super" | "self")
                && mods.contains_key(&[path.clone(), vec![full[0].clone()]].concat())
            {
                full.insert(0, "self".into());
            }
            let Some(abs) = absolute(path, &full) else {
                continue;
            };
            if let Some(target) = resolve(&mods, &reexports, &abs, 0)
                && &target != path
            {
                edges.entry(path).or_default().insert(target);
            }
        }
    }
    let mut out = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if edges.get(b).is_some_and(|t| t.contains(*a)) && *a < b {
                out.push(format!(
                    "`{}` and `{}` import from each other",
                    display(a),
                    display(b)
                ));
            }
        }
    }
    out
}

#[test]
fn no_module_imports_from_a_module_that_imports_it_back() {
    let found: Vec<String> = members()
        .iter()
        .flat_map(|member| {
            cycles(&repo().join(member).join("src"))
                .into_iter()
                .map(move |c| format!("{member}: {c}"))
        })
        .collect();
    assert!(found.is_empty(), "{found:#?}");
}

fn display(path: &[String]) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

#[test]
fn nothing_reads_the_shared_folder_outside_the_repository() {
    let mut found = Vec::new();
    let mut stack = vec![repo()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | ".git" | "fixtures" | "models" | "results"
                ) && !name.starts_with(".venv")
                {
                    stack.push(path);
                }
                continue;
            }
            let code = matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("rs" | "sh" | "py" | "toml")
            ) || path
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|d| d == "scripts" || d == ".ci");
            if code
                && std::fs::read_to_string(&path)
                    .is_ok_and(|t| t.contains(&["..", "/shared"].concat()))
            {
                found.push(path.display().to_string());
            }
        }
    }
    assert!(
        found.is_empty(),
        "these read the shared folder beside the repository; the repository's own copy (fixtures/) is what tests read: {found:#?}"
    );
}

#[test]
fn the_checker_sees_a_cycle_through_a_reexport_and_nothing_else() {
    // Two sibling modules, one reaching the other through their parent's re-export.
    let dir = std::env::temp_dir().join(format!("agentfly-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(src.join(rel), text).unwrap();
    write("lib.rs", "mod a;\npub use a::Y as Why;\n");
    write("a/mod.rs", "mod x;\nmod y;\npub use y::Y;\n");
    write("a/x.rs", "use crate::Why;\npub struct X;\n");
    write(
        "a/y.rs",
        "pub struct Y;\n// use super::x::X;\nconst S: &str = \"super::x::X\";\n",
    );
    assert_eq!(
        cycles(&src),
        Vec::<String>::new(),
        "comments and strings are not code"
    );
    write(
        "a/y.rs",
        "pub struct Y;\nfn f() -> super::x::X { crate::a::x::X }\n",
    );
    assert_eq!(cycles(&src), ["`a::x` and `a::y` import from each other"]);
    let mods = modules(&src);
    assert_eq!(
        mods[&vec!["a".to_string(), "x".to_string()]].uses,
        [Use {
            public: false,
            path: vec!["crate".into(), "Why".into()],
            name: "Why".into(),
        }]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The workspace crates (`agentfly-*`) a member names in its `[dependencies]`.
fn workspace_dependencies(member: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join(member).join("Cargo.toml")).unwrap();
    let section = text
        .split("\n[dependencies]\n")
        .nth(1)
        .map_or("", |s| s.split("\n[").next().unwrap_or(""));
    section
        .lines()
        .filter_map(|line| line.split(['.', ' ', '=']).next())
        .filter(|name| name.starts_with("agentfly-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_model_engine_and_trainer_depend_one_way() {
    // MCP's client sits beside the tools: on core only, and the trainer may use it.
    let allowed: [(&str, &[&str]); 6] = [
        ("agentfly-core", &["agentfly-macros"]),
        ("agentfly-mcp", &["agentfly-core"]),
        ("agentfly-serve", &["agentfly-core"]),
        ("agentfly-model", &["agentfly-core"]),
        ("agentfly-engine", &["agentfly-core", "agentfly-model"]),
        (
            "agentfly-trainer",
            &[
                "agentfly-core",
                "agentfly-mcp",
                "agentfly-serve",
                "agentfly-model",
                "agentfly-engine",
            ],
        ),
    ];
    for (member, may) in allowed {
        let uses = workspace_dependencies(member);
        let extra: Vec<_> = uses.iter().filter(|d| !may.contains(&d.as_str())).collect();
        assert!(
            extra.is_empty(),
            "{member} may depend on {may:?} only (trainer → engine → model → core), not {extra:?}"
        );
    }
    // The parser sees what it should: the trainer names both crates below it.
    assert!(workspace_dependencies("agentfly-trainer").contains("agentfly-engine"));
}

#[test]
fn no_crate_holds_more_than_40_percent_of_the_code() {
    let mut sizes = BTreeMap::new();
    for member in members() {
        let mut files = Vec::new();
        rust_files(&repo().join(&member).join("src"), &mut files);
        let lines: usize = files
            .iter()
            .map(|f| {
                non_test(&std::fs::read_to_string(f).unwrap())
                    .lines()
                    .count()
            })
            .sum();
        sizes.insert(member, lines);
    }
    let total: usize = sizes.values().sum();
    for (member, lines) in &sizes {
        let share = *lines as f64 / total as f64;
        println!("{member}: {lines} lines, {:.0}%", share * 100.0);
        assert!(
            share <= 0.40,
            "{member} holds {:.0}% of the workspace's {total} lines of code: split it",
            share * 100.0
        );
    }
}
