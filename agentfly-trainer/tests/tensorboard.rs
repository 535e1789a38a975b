//! The event files agentfly writes, read back by TensorBoard's own reader (`tensorboard`
//! from PyPI, in `.venv-bench`): scalars, histograms, text, and a resumed run's restart,
//! which drops what the interrupted run wrote past it.

use agentfly_testdata::tensorboard_events;
use agentfly_trainer::tensorboard::EventWriter;
use serde_json::{Value, json};

fn steps(series: &Value) -> Vec<u64> {
    series
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_u64().unwrap())
        .collect()
}

#[test]
fn tensorboard_reads_what_the_writer_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventWriter::create(dir.path()).unwrap();
    for step in 1..=3u64 {
        let x = step as f64;
        w.scalars(
            step,
            &[("rollout/reward_mean", x / 4.0), ("update/kl", x * 1e-3)],
        )
        .unwrap();
        w.histogram("rollout/rewards", step, &[0.0, 1.0, x, 0.5])
            .unwrap();
    }
    w.text(
        "samples/best",
        2,
        "sample `a`\n\n```text\n[model] 2+2 → 4\n```",
    )
    .unwrap();
    let mut sft = EventWriter::create(&dir.path().join("sft")).unwrap();
    sft.scalars(1, &[("sft/loss", 2.5)]).unwrap();

    let read = tensorboard_events(dir.path());
    let run = &read["."];
    assert_eq!(
        run["scalars"]["rollout/reward_mean"],
        json!([[1, 0.25], [2, 0.5], [3, 0.75]])
    );
    let kl = run["scalars"]["update/kl"].as_array().unwrap();
    assert!((kl[2][1].as_f64().unwrap() - 3e-3).abs() < 1e-9, "{kl:?}");
    // [step, num, min, max, sum]
    assert_eq!(
        run["histograms"]["rollout/rewards"][2],
        json!([3, 4.0, 0.0, 3.0, 4.5])
    );
    assert_eq!(
        run["texts"]["samples/best"],
        json!([[2, "sample `a`\n\n```text\n[model] 2+2 → 4\n```"]])
    );
    assert_eq!(read["sft"]["scalars"]["sft/loss"], json!([[1, 2.5]]));
}

#[test]
fn a_resumed_run_replaces_what_the_interrupted_one_wrote_past_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // The first run: steps 1-4 written, then interrupted; its checkpoint is step 2.
    let mut first = EventWriter::create(dir.path()).unwrap();
    first.start_at(1).unwrap();
    for step in 1..=4u64 {
        first.scalars(step, &[("r", 1.0)]).unwrap();
    }
    drop(first);
    // Names sort by the second they were made in: the resumed run's file must sort after.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut resumed = EventWriter::create(dir.path()).unwrap();
    resumed.start_at(3).unwrap();
    for step in 3..=5u64 {
        resumed.scalars(step, &[("r", 2.0)]).unwrap();
    }
    let read = tensorboard_events(dir.path());
    let r = &read["."]["scalars"]["r"];
    assert_eq!(steps(r), [1, 2, 3, 4, 5], "{r}");
    assert_eq!(
        *r,
        json!([[1, 1.0], [2, 1.0], [3, 2.0], [4, 2.0], [5, 2.0]])
    );
}
