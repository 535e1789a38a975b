//! A run's tools are made ready before its first chain from the files its configuration
//! names, or the run stops with the reason (never every call failing instead).

use agentfly_core::{CallContext, Toolbox};
use agentfly_tools::prepare::{Needs, prepare};
use serde_json::json;
use std::collections::BTreeMap;

#[tokio::test]
async fn search_is_made_ready_from_the_named_corpus_or_the_run_stops() {
    let toolbox = Toolbox::from_names(&["search", "retrieve"]).unwrap();
    // Nothing named, no default: stopped, saying what to add.
    let err = prepare(&toolbox, &Needs::default()).unwrap_err();
    assert!(err.contains("wiki_corpus"), "{err}");
    // A named corpus that is not there: stopped, naming it.
    let missing = BTreeMap::from([("wiki_corpus".to_string(), "/nonexistent/wiki.json".into())]);
    let needs = Needs {
        resources: Some(&missing),
        ..Needs::default()
    };
    let err = prepare(&toolbox, &needs).unwrap_err();
    assert!(
        err.contains("search and retrieve cannot work") && err.contains("/nonexistent/wiki.json"),
        "{err}"
    );
    // The real one: ready, and a call works whatever the working directory.
    let corpus = agentfly_testdata::wiki_corpus();
    let named = BTreeMap::from([("wiki_corpus".to_string(), corpus)]);
    let needs = Needs {
        resources: Some(&named),
        ..Needs::default()
    };
    prepare(&toolbox, &needs).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::env::set_current_dir(elsewhere.path()).unwrap();
    let out = toolbox
        .call(
            &mut CallContext::new(),
            "search",
            json!({"query": "Marie Curie"}),
        )
        .await;
    assert!(!out.is_error && out.text.contains("Marie Curie"), "{out:?}");
}

#[test]
fn world_tools_without_a_world_stop_the_run() {
    let toolbox = Toolbox::from_names(&["act"]).unwrap();
    let err = prepare(&toolbox, &Needs::default()).unwrap_err();
    assert!(err.contains("act") && err.contains("world"), "{err}");
    let needs = Needs {
        world: true,
        ..Needs::default()
    };
    prepare(&toolbox, &needs).unwrap();
}
