//! `docs/configuration.md` lists every key of `TrainerConfig` with its default, and cannot
//! drift from the code: its ` ```toml ` blocks together must parse as a configuration, set
//! every key the configuration serializes (a key added to the code without a line in the
//! page fails here), and show each key's default unless the line's comment says `required`
//! (leaving it out is an error) or `example` (leaving it out gives another value). Each
//! ` ```toml alternative ` block replaces the reference's table of the same name (the other
//! estimators), must parse, and must set every key of what it configures.

use agentfly_trainer::run::TrainerConfig;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use toml::Table;

/// The page, from the workspace's root.
fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    std::fs::read_to_string(path).expect("docs/configuration.md")
}

/// The page's fenced blocks whose info string is `info`, in order.
fn blocks(page: &str, info: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match &mut current {
            Some(block) if line.trim_start().starts_with("```") => {
                found.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None if line.trim() == format!("```{info}") => current = Some(String::new()),
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed block in the page");
    found
}

/// Each `key = value` line's dotted path (its table's, then its key) and comment.
fn comments(toml_text: &str) -> BTreeMap<String, String> {
    let mut table = String::new();
    let mut found = BTreeMap::new();
    for line in toml_text.lines().map(str::trim) {
        if line.starts_with('[') {
            // `[table]`, or `[[array]]` of tables (its first element is the one checked).
            table = line.trim_matches(|c| c == '[' || c == ']').to_string();
        } else if let Some((key, rest)) = line.split_once('=') {
            let comment = rest.split_once('#').map(|(_, c)| c.trim()).unwrap_or("");
            found.insert(format!("{table}.{}", key.trim()), comment.to_string());
        }
    }
    found
}

/// Every leaf of `value` (scalars, arrays of scalars, nulls; tables, and arrays of tables
/// through their first element, are descended), by dotted path.
fn leaves(prefix: &str, value: &Json, out: &mut BTreeMap<String, Json>) {
    match value {
        Json::Array(items) if items.first().is_some_and(Json::is_object) => {
            leaves(prefix, &items[0], out);
        }
        Json::Object(map) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(&path, inner, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

/// The value at a dotted path.
fn at<'a>(value: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(value, |v, key| match v {
        Json::Array(items) => items.first()?.get(key),
        _ => v.get(key),
    })
}

fn parse(table: &Table) -> Result<TrainerConfig, String> {
    toml::Value::Table(table.clone())
        .try_into::<TrainerConfig>()
        .map_err(|e| e.to_string())
}

/// Every key the parsed configuration serializes (nulls included: an optional key the page
/// does not set is missing from it) is one the page sets.
fn assert_complete(documented: &Table, what: &str) {
    let config = parse(documented).unwrap_or_else(|e| panic!("{what} does not parse: {e}"));
    let mut serialized = BTreeMap::new();
    leaves("", &serde_json::to_value(&config).unwrap(), &mut serialized);
    let mut written = BTreeMap::new();
    leaves("", &serde_json::to_value(documented).unwrap(), &mut written);
    let missing: Vec<_> = serialized
        .keys()
        .filter(|k| !written.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: keys of TrainerConfig that docs/configuration.md does not list: {missing:?}"
    );
}

/// Removes the dotted `path` from `table`.
fn without(table: &Table, path: &str) -> Table {
    let mut table = table.clone();
    let keys: Vec<&str> = path.split('.').collect();
    let (last, parents) = keys.split_last().unwrap();
    let mut cursor = &mut table;
    for key in parents {
        let value = cursor
            .get_mut(*key)
            .unwrap_or_else(|| panic!("{path}: no table `{key}`"));
        // An array of tables: its first element.
        let value = match value {
            toml::Value::Array(items) => items.first_mut().expect("a non-empty array"),
            other => other,
        };
        cursor = value
            .as_table_mut()
            .unwrap_or_else(|| panic!("{path}: `{key}` is not a table"));
    }
    assert!(cursor.remove(*last).is_some(), "{path} is not in the page");
    table
}

#[test]
fn the_configuration_page_lists_every_key_with_its_default() {
    let page = page();
    let reference = blocks(&page, "toml").concat();
    let documented: Table = reference
        .parse()
        .expect("the page's blocks are one TOML file");
    assert_complete(&documented, "the reference blocks");

    let lines = comments(&reference);
    let full = parse(&documented).unwrap();
    let documented_json = serde_json::to_value(&documented).unwrap();
    let mut wrong = Vec::new();
    for (path, comment) in &lines {
        match parse(&without(&documented, path)) {
            Err(_) if comment.contains("required") => {}
            Err(e) => wrong.push(format!("{path}: required ({e}), but not marked `required`")),
            Ok(config) => {
                let default_is_shown = config == full;
                if !default_is_shown && !comment.contains("example") {
                    let json = serde_json::to_value(&config).unwrap();
                    wrong.push(format!(
                        "{path}: the page shows {}, the default is {}, and the line does not \
                         say `example`",
                        at(&documented_json, path).unwrap(),
                        at(&json, path).map_or("none".into(), Json::to_string)
                    ));
                }
                if default_is_shown && (comment.contains("required") || comment.contains("example"))
                {
                    wrong.push(format!(
                        "{path}: shows its default but says `required` or `example`"
                    ));
                }
            }
        }
        if comment.is_empty() {
            wrong.push(format!("{path}: no comment saying what it is"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_alternative_in_the_configuration_page_parses_and_is_complete() {
    let page = page();
    let documented: Table = blocks(&page, "toml").concat().parse().unwrap();
    let alternatives = blocks(&page, "toml alternative");
    assert!(
        alternatives.len() >= 3,
        "the other estimators are on the page"
    );
    for text in alternatives {
        let alternative: Table = text.parse().expect("an alternative block is TOML");
        let mut merged = documented.clone();
        for (name, value) in alternative {
            match (merged.get_mut(&name), value) {
                (Some(toml::Value::Table(table)), toml::Value::Table(keys)) => table.extend(keys),
                (_, value) => {
                    merged.insert(name, value);
                }
            }
        }
        assert_complete(&merged, &format!("the alternative\n{text}"));
    }
}

#[test]
fn a_key_the_page_does_not_list_is_caught() {
    // The check itself: dropping a line that has a default from the page must be noticed.
    let page = page();
    let documented: Table = blocks(&page, "toml").concat().parse().unwrap();
    let result = std::panic::catch_unwind(|| {
        assert_complete(&without(&documented, "train.loss.entropy_coef"), "trimmed")
    });
    assert!(result.is_err(), "a missing key went unnoticed");
}
