//! docs/tasks.md's reference block is a task file that sets every key of the run's own
//! tables (`[task]`, `[data]`, `[sft]`, `[output]`, `[report]`), each at its default unless
//! its comment says `required` or `example`; a key added to the code without a line there
//! fails here.

use agentfly_jobs::job::TaskSpec;
use agentfly_jobs::job::spec::{OutputSettings, SftSettings};
use std::path::Path;

/// The first TOML block of docs/tasks.md.
fn reference_block() -> String {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/tasks.md"))
            .unwrap();
    let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

#[test]
fn the_documented_task_file_reads_and_covers_every_key_of_the_runs_tables() {
    let block = reference_block();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task.toml");
    std::fs::write(&path, &block).unwrap();
    let spec = TaskSpec::load(&path, None, &[]).unwrap();

    // Every key the code has, in the block.
    let written: toml::Table = toml::from_str(&block).unwrap();
    let full = toml::Table::try_from(&spec).unwrap();
    for table in ["task", "data", "sft", "output", "report"] {
        let keys = |t: &toml::Table| -> Vec<String> {
            let mut k: Vec<String> = t[table].as_table().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&written),
            keys(&full),
            "[{table}]: the keys documented and the code's"
        );
    }
    assert!(written["presets"]["smoke"].is_table());

    // Defaults where the comment does not say otherwise.
    assert_eq!(spec.sft, SftSettings::default());
    assert_eq!(spec.output, OutputSettings::default());
    assert_eq!(
        (
            spec.task.items.as_str(),
            spec.task.eval_every,
            spec.task.preset.as_str()
        ),
        ("questions", 5, "default")
    );
    assert_eq!(spec.data.train, dir.path().join("data/train.jsonl"));
    let smoke = TaskSpec::load(&path, Some("smoke"), &[]).unwrap();
    assert_eq!((smoke.train.steps, smoke.rollout.samples_per_step), (1, 2));

    // The [world] block reads as the remote environment's configuration.
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/tasks.md"))
            .unwrap();
    let world_at = doc.find("```toml\n[world]").expect("the [world] block") + "```toml\n".len();
    let world = &doc[world_at..world_at + doc[world_at..].find("```").unwrap()];
    std::fs::write(&path, format!("{block}\n{world}")).unwrap();
    let with_world = TaskSpec::load(&path, None, &[]).unwrap();
    assert_eq!(
        with_world.world.unwrap().command,
        ["python3", "my_world.py"]
    );
}
