//! The example training binary runs and sees both the standard tools and its own.

use std::process::Command;

#[test]
fn the_custom_binary_sees_standard_and_own_tools() {
    let out = Command::new(env!("CARGO_BIN_EXE_custom_agent"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("tools: calculator, convert_length, take_note, submit_answer\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "convert_length {\"value\": 5, \"from\": \"km\", \"to\": \"mi\"}\n  -> [ok] 3.1069\n"
        ),
        "{text}"
    );
    // The two take_note calls share one Scratchpad: the second sees the first note.
    assert!(
        text.contains("  -> [ok] 5 km is about 3.1 mi\ncheck the marathon distance\n"),
        "{text}"
    );
    assert!(text.contains("  -> [ok] 26.218757456454\n"), "{text}");
    assert!(text.contains("  -> [error] Error calling tool `convert_length` (invalid arguments): argument `from`: unknown variant `parsec`"), "{text}");
    assert!(
        text.contains("reward: 1 {\"abs_error\": 0.0, \"parsed\": 1.0}"),
        "{text}"
    );
}

#[test]
fn the_training_example_config_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("runs/units.toml");
    let config = agentfly_trainer::run::TrainerConfig::load(&path).unwrap();
    assert_eq!(config.agent.tools, ["convert_length", "submit_answer"]);
    assert!(config.data.train.exists() && config.data.eval.as_ref().unwrap().exists());
    let samples = agentfly_core::data::read_jsonl(&config.data.train).unwrap();
    assert_eq!(samples.len(), 36);
}
