//! Held-out evaluation counts chains that failed (their reward could not be computed, the
//! policy or the environment was lost) apart from wrong answers, retries them, and is an
//! error when too many still fail, so that no job caches a lowered accuracy.

use agentfly_testdata::support as common;

use agentfly_core::data::read_jsonl;
use agentfly_trainer::run::{TrainError, Trainer};
use common::tiny_chat::{tiny_chat_model, write_config};
use serde_json::json;

agentfly_core::link!(agentfly_tools);

#[test]
fn failed_chains_are_counted_apart_and_too_many_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_chat_model(dir.path());
    let config = write_config(dir.path(), &model, 1, "out");
    // `exact_numeric` reads `answer`: three samples have one, the fourth does not.
    let samples: String = (0..4)
        .map(|i| {
            let mut s = json!({"id": format!("q{i}"), "question": format!("{i}+{i}?")});
            if i < 3 {
                s["answer"] = json!(2 * i);
            }
            format!("{s}\n")
        })
        .collect();
    let data = dir.path().join("held-out.jsonl");
    std::fs::write(&data, samples).unwrap();
    let samples = read_jsonl(&data).unwrap();
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("odd_length", "exact_numeric");
    std::fs::write(&config, &text).unwrap();

    // One of four failed, over the default 2%: an error naming the sample and the reason.
    let trainer = Trainer::from_config_file(&config).unwrap();
    let err = trainer.evaluate(&samples).unwrap_err();
    assert!(
        matches!(
            err,
            TrainError::Evaluation {
                failed: 1,
                total: 4,
                retries: 2,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("sample q3") && message.contains("`answer`"),
        "{message}"
    );

    // Allowed: the report counts it as failed, not as a wrong answer.
    std::fs::write(&config, format!("{text}\n[eval]\nmax_failures = 0.5\n")).unwrap();
    let trainer = Trainer::from_config_file(&config).unwrap();
    let report = trainer.evaluate(&samples).unwrap();
    assert_eq!((report.samples, report.failed), (4, 1), "{report:?}");
    assert_eq!(report.failures(), 1);
    assert!(report.correct <= 3);
    assert!(
        report
            .first_failure
            .as_deref()
            .is_some_and(|f| f.starts_with("sample q3: ")),
        "{report:?}"
    );
    assert_eq!(report.summary.reward_errors, 1);
}
