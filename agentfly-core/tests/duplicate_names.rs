//! Two tools (or rewards) with one name are reported with both origins. This lives in its
//! own test binary: the duplicates would poison every other test's registry.

use agentfly_core::{RegistryError, Rewards, Toolbox, registry, reward, tool};

mod weather {
    use super::*;

    /// Today's weather.
    #[tool]
    pub fn forecast() -> String {
        "sunny".into()
    }

    #[reward]
    pub fn score() -> f32 {
        1.0
    }
}

mod stocks {
    use super::*;

    /// Tomorrow's prices.
    #[tool(name = "forecast")]
    pub fn predict() -> String {
        "up".into()
    }

    #[reward(name = "score")]
    pub fn other_score() -> f32 {
        0.0
    }
}

#[test]
fn duplicate_tool_names_are_reported_with_both_origins() {
    let err = Toolbox::all().unwrap_err();
    let RegistryError::DuplicateTool {
        name,
        first,
        second,
    } = &err
    else {
        panic!("expected a duplicate, got {err}");
    };
    assert_eq!(name, "forecast");
    let mut modules = [first.module_path, second.module_path];
    modules.sort();
    assert_eq!(
        modules,
        ["duplicate_names::stocks", "duplicate_names::weather"]
    );
    let text = err.to_string();
    assert!(
        text.starts_with("two tools are named `forecast`: one in duplicate_names::"),
        "{text}"
    );
    assert!(text.contains("tests/duplicate_names.rs:"), "{text}");
    assert!(
        text.ends_with("rename one with #[tool(name = \"...\")]"),
        "{text}"
    );
    assert_eq!(registry::check().unwrap_err(), err);
    assert!(Toolbox::from_names(&["forecast"]).is_err());
}

#[test]
fn duplicate_reward_names_are_reported_with_both_origins() {
    let err = Rewards::all().unwrap_err().to_string();
    assert!(
        err.starts_with("two rewards are named `score`: one in duplicate_names::"),
        "{err}"
    );
    assert!(
        err.contains("duplicate_names::stocks") && err.contains("duplicate_names::weather"),
        "{err}"
    );
}
