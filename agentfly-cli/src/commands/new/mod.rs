//! `agentfly new NAME`: a project a user owns — a crate with one `#[tool]` and one
//! `#[reward]`, a binary that links them into agentfly's pipeline, a `task.toml`, a system
//! prompt and a small generated dataset (letter counting) — that builds and trains out of the
//! box, offline once the model is fetched. agentfly's crates are path dependencies on the
//! checkout this binary was built from, until they are published.

mod words;

use anyhow::{Context, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `agentfly new`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The project's (and its crate's) name: letters, digits, `-` and `_`, starting with a
    /// letter.
    pub name: String,
    /// Where to make it (default: `./NAME`); it must not exist or be empty.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// The agentfly checkout its crates come from (default: the one this binary was built
    /// from).
    #[arg(long)]
    pub agentfly: Option<PathBuf>,
}

/// The project's files: path, then template (placeholders `{{name}}`, `{{crate}}`,
/// `{{agentfly}}`).
const TEMPLATE: [(&str, &str); 7] = [
    ("Cargo.toml", include_str!("template/Cargo.toml.in")),
    (".gitignore", include_str!("template/gitignore.in")),
    ("README.md", include_str!("template/README.md.in")),
    ("task.toml", include_str!("template/task.toml.in")),
    ("system.txt", include_str!("template/system.txt.in")),
    ("src/lib.rs", include_str!("template/src/lib.rs.in")),
    ("src/main.rs", include_str!("template/src/main.rs.in")),
];

/// Samples per split (`train`, `val`, `test`, `demos`), and of the smoke preset's.
const SIZES: [(&str, usize, usize); 4] = [
    ("train", 64, 8),
    ("val", 8, 2),
    ("test", 30, 4),
    ("demos", 16, 4),
];

/// Makes the project.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let name = &args.name;
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}`: a project's name has letters, digits, `-` and `_`, and starts with a letter"
        );
    }
    let dir = args.path.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!(
            "{}: exists and is not empty; nothing was written",
            dir.display()
        );
    }
    let agentfly = match &args.agentfly {
        Some(path) => path.clone(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let agentfly = agentfly
        .canonicalize()
        .with_context(|| format!("the agentfly checkout {}", agentfly.display()))?;
    if !agentfly.join("agentfly-jobs/Cargo.toml").is_file() {
        bail!(
            "{}: not an agentfly checkout (no agentfly-jobs/Cargo.toml); name one with --agentfly",
            agentfly.display()
        );
    }
    let crate_name = name.replace('-', "_");
    for (path, template) in TEMPLATE {
        let text = template
            .replace("{{name}}", name)
            .replace("{{crate}}", &crate_name)
            .replace("{{agentfly}}", &agentfly.display().to_string());
        write(&dir.join(path), &text)?;
    }
    // The dependency versions agentfly is tested with (cargo drops the entries it does not
    // need on the first build).
    let lock = agentfly.join("Cargo.lock");
    if lock.is_file() {
        std::fs::copy(&lock, dir.join("Cargo.lock")).with_context(|| lock.display().to_string())?;
    }
    for (split, samples) in dataset() {
        let lines = |samples: &[serde_json::Value]| -> String {
            samples.iter().map(|s| format!("{s}\n")).collect()
        };
        let smoke = SIZES.iter().find(|s| s.0 == split).map_or(0, |s| s.2);
        write(&dir.join(format!("data/{split}.jsonl")), &lines(&samples))?;
        write(
            &dir.join(format!("data/smoke/{split}.jsonl")),
            &lines(&samples[..smoke]),
        )?;
    }
    println!(
        "made {} ({name}): its crate, task.toml and data",
        dir.display()
    );
    println!(
        "next: cd {} && cargo run --release -- task.toml --preset smoke",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
    }
    std::fs::write(path, text).with_context(|| path.display().to_string())
}

/// The splits: letter-counting questions, each word in one split only (so no held-out
/// word is trained on), the same every time.
fn dataset() -> Vec<(&'static str, Vec<serde_json::Value>)> {
    let mut words: Vec<&str> = words::WORDS.to_vec();
    // A fixed shuffle (SplitMix64), so the data do not depend on the word list's order.
    let mut state = 0x5eed_u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..words.len()).rev() {
        words.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let mut words = words.into_iter();
    SIZES
        .iter()
        .map(|&(split, size, _)| {
            let samples = (0..size)
                .map(|i| {
                    let word = words
                        .next()
                        .expect("the word list is longer than the splits");
                    sample(split, i, word, next())
                })
                .collect();
            (split, samples)
        })
        .collect()
}

/// A question about `word`: how often one of its letters (the most frequent one for an odd
/// `pick`, else another) appears; as a demonstration for `demos`.
fn sample(split: &str, i: usize, word: &str, pick: u64) -> serde_json::Value {
    let mut letters: Vec<char> = word.chars().collect();
    letters.sort_unstable();
    letters.dedup();
    let count = |c: char| word.chars().filter(|&w| w == c).count();
    let most = letters
        .iter()
        .copied()
        .max_by_key(|&c| (count(c), std::cmp::Reverse(c)));
    let letter = if pick % 2 == 1 {
        most.expect("a word has letters")
    } else {
        letters[(pick / 2 % letters.len() as u64) as usize]
    };
    let answer = count(letter);
    let question = format!("How many times does the letter '{letter}' appear in \"{word}\"?");
    let id = format!("{split}-{i:03}");
    if split != "demos" {
        return json!({"id": id, "question": question, "answer": answer, "word": word, "letter": letter.to_string()});
    }
    let call = |name: &str, arguments: serde_json::Value| {
        format!(
            "<tool_call>\n{}\n</tool_call>",
            json!({"name": name, "arguments": arguments})
        )
    };
    json!({
        "id": id,
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": call("count_letter", json!({"word": word, "letter": letter.to_string()}))},
            {"role": "tool", "name": "count_letter", "content": answer.to_string()},
            {"role": "assistant", "content": call("submit_answer", json!({"answer": answer.to_string()}))},
        ],
        "answer": answer,
    })
}
