//! A crate that depends only on agentfly-tools finds its tools and rewards by name.

use agentfly_tools::core::{Rewards, Toolbox};

#[test]
fn finds_the_standard_tools_through_the_registry() {
    let all = Toolbox::all().expect("no duplicate names");
    let names = all.names();
    assert!(names.contains(&"calculator"), "{names:?}");
    assert!(names.contains(&"submit_answer"), "{names:?}");

    let toolbox = Toolbox::from_names(&["calculator", "submit_answer"]).unwrap();
    let observation = toolbox.call_json_blocking("calculator", r#"{"expression": "123 + 456"}"#);
    assert_eq!(observation.text, "579");
    assert!(!observation.is_error);

    let submitted = toolbox.call_json_blocking("submit_answer", r#"{"answer": 579}"#);
    assert!(submitted.terminal, "{submitted:?}");
}

#[test]
fn finds_the_standard_rewards_through_the_registry() {
    let rewards = Rewards::all().unwrap();
    assert!(rewards.names().contains(&"exact_numeric"));
    assert!(rewards.names().contains(&"exact_match"));
    assert_eq!(rewards.get("exact_numeric").unwrap().fields, ["answer"]);
}
