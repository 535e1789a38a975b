//! Reading a run's TOML configuration, with `--set key=value` overrides: a mistake names
//! the file, the line and the key (or the override).

use super::config::{ConfigError, TrainerConfig};
use std::path::Path;

/// A TOML error on one line: where it is (line and text) and what is wrong.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text[..start].matches('\n').count() + 1;
            let source = text.lines().nth(line - 1).unwrap_or("").trim();
            format!("line {line} (`{source}`): {message}")
        }
        None => message,
    }
}

/// The value of an override: TOML (`8`, `0.7`, `true`, `["a", "b"]`, `"text"`), or, when it
/// is not TOML, the text itself as a string (`--set agent.format=code`).
fn override_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("value = {text}"))
        .ok()
        .and_then(|mut t| t.remove("value"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// Sets `key.path=value` in `table`, making the tables on the way; a number indexes an array
/// of tables (`agent.mcp.0.cwd`). The value is TOML, or else a string.
pub fn set_key(table: &mut toml::Table, assignment: &str) -> Result<(), String> {
    let (key, value) = assignment
        .split_once('=')
        .ok_or_else(|| format!("--set {assignment}: write KEY=VALUE, e.g. rollout.chains=8"))?;
    let parts: Vec<&str> = key.trim().split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("--set {assignment}: `{}` is not a key", key.trim()));
    }
    set_path(table, &parts, override_value(value.trim()))
        .map_err(|e| format!("--set {assignment}: {e}"))
}

/// Sets the key `parts` to `value` below `table`.
fn set_path(table: &mut toml::Table, parts: &[&str], value: toml::Value) -> Result<(), String> {
    let mut here = table;
    let mut i = 0;
    while i + 1 < parts.len() {
        let at = parts[..=i].join(".");
        let next = here
            .entry(parts[i].to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = match next {
            toml::Value::Table(t) => {
                i += 1;
                t
            }
            toml::Value::Array(items) => {
                let entry = parts
                    .get(i + 1)
                    .filter(|_| i + 2 < parts.len())
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| items.get_mut(n));
                let Some(toml::Value::Table(t)) = entry else {
                    return Err(format!(
                        "`{at}` is a list; name a key of one of its entries by number ({at}.0.KEY)"
                    ));
                };
                i += 2;
                t
            }
            _ => return Err(format!("`{at}` is not a table")),
        };
    }
    here.insert(parts[i].to_string(), value);
    Ok(())
}

impl TrainerConfig {
    /// Reads a TOML file; relative paths in it are relative to the file's directory.
    ///
    /// ```
    /// use agentfly_trainer::run::TrainerConfig;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("run.toml");
    /// let required = "[model]\npath = \"model.gguf\"\n[data]\ntrain = \"train.jsonl\"\n\
    ///                 [agent]\ntools = []\nreward = \"exact\"\n[output]\ndir = \"out\"\n";
    /// std::fs::write(&path, required)?;
    /// let config = TrainerConfig::load(&path)?;
    /// assert_eq!(config.rollout.chains, 4); // everything else has a default
    /// assert_eq!(config.data.train, dir.path().join("train.jsonl")); // beside the file
    ///
    /// // A mistake names the file, the line and the key.
    /// std::fs::write(&path, format!("{required}[rollout]\nchians = 8\n"))?;
    /// let error = TrainerConfig::load(&path).unwrap_err().to_string();
    /// assert!(error.contains("line 11") && error.contains("chians"), "{error}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::load_with(path, &[])
    }

    /// [`load`](Self::load) with overrides `KEY=VALUE` applied over the file's values, as
    /// if written in it (`rollout.chains=8`, `agent.format=code`, `optim.lr=1e-6`): the value
    /// is TOML, or else a string; paths are relative to the file's directory, as the file's.
    ///
    /// ```
    /// use agentfly_trainer::run::TrainerConfig;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("run.toml");
    /// std::fs::write(&path, "[model]\npath = \"m.gguf\"\n[data]\ntrain = \"t.jsonl\"\n\
    ///                        [agent]\ntools = []\nreward = \"exact\"\n[output]\ndir = \"out\"\n")?;
    /// let sets = ["rollout.chains=8".to_string(), "agent.format=code".to_string()];
    /// let config = TrainerConfig::load_with(&path, &sets)?;
    /// assert_eq!((config.rollout.chains, config.agent.format.as_str()), (8, "code"));
    /// let bad = TrainerConfig::load_with(&path, &["rollout.chians=8".to_string()]);
    /// assert!(bad.unwrap_err().to_string().contains("chians"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn load_with(path: impl AsRef<Path>, sets: &[String]) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let error = |message: String| ConfigError {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        // The file alone first: its mistakes are reported on its own lines.
        let mut config: TrainerConfig =
            toml::from_str(&text).map_err(|e| error(toml_error(&text, &e)))?;
        if !sets.is_empty() {
            let mut table: toml::Table =
                toml::from_str(&text).map_err(|e| error(toml_error(&text, &e)))?;
            for set in sets {
                set_key(&mut table, set).map_err(error)?;
            }
            let merged = toml::to_string(&table).map_err(|e| error(e.to_string()))?;
            config = toml::from_str(&merged).map_err(|e| {
                error(format!(
                    "with --set {}: {}",
                    sets.join(" --set "),
                    toml_error(&merged, &e)
                ))
            })?;
        }
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve(base);
        config.validate().map_err(error)?;
        Ok(config)
    }

    /// The configuration as TOML, every default written out (`agentfly config show`).
    pub fn to_toml(&self) -> Result<String, String> {
        toml::to_string_pretty(self).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn values_are_toml_or_else_text() {
        let mut t = table("[rollout]\nchains = 4\n");
        for set in [
            "rollout.chains=8",
            "optim.lr = 1e-6",
            "agent.format=code",
            "agent.tools=[\"a\", \"b\"]",
            "output.dir=runs/x",
            "rollout.overlap=true",
        ] {
            set_key(&mut t, set).unwrap();
        }
        assert_eq!(t["rollout"]["chains"].as_integer(), Some(8));
        assert_eq!(t["optim"]["lr"].as_float(), Some(1e-6));
        assert_eq!(t["agent"]["format"].as_str(), Some("code"));
        assert_eq!(t["agent"]["tools"].as_array().unwrap().len(), 2);
        assert_eq!(t["output"]["dir"].as_str(), Some("runs/x"));
        assert_eq!(t["rollout"]["overlap"].as_bool(), Some(true));
    }

    #[test]
    fn an_entry_of_a_list_of_tables_is_named_by_its_number() {
        let mut t = table("[[agent.mcp]]\nname = \"a\"\n[[agent.mcp]]\nname = \"b\"\n");
        set_key(&mut t, "agent.mcp.1.cwd=/srv").unwrap();
        assert_eq!(t["agent"]["mcp"][1]["cwd"].as_str(), Some("/srv"));
        let e = set_key(&mut t, "agent.mcp.cwd=/srv").unwrap_err();
        assert!(e.contains("`agent.mcp` is a list"), "{e}");
        let e = set_key(&mut t, "agent.mcp.5.cwd=/srv").unwrap_err();
        assert!(e.contains("`agent.mcp` is a list"), "{e}");
    }

    #[test]
    fn malformed_overrides_say_what_to_write() {
        let mut t = table("[rollout]\nchains = 4\n");
        assert!(
            set_key(&mut t, "rollout.chains")
                .unwrap_err()
                .contains("KEY=VALUE")
        );
        assert!(
            set_key(&mut t, "rollout..x=1")
                .unwrap_err()
                .contains("not a key")
        );
        let e = set_key(&mut t, "rollout.chains.x=1").unwrap_err();
        assert!(e.contains("`rollout.chains` is not a table"), "{e}");
    }
}
