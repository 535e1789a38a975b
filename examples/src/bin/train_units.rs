//! A custom training binary in a few lines: this crate's tools (`convert_length`,
//! `take_note`) and reward (`close_enough`) next to the standard ones, trained with RL as a
//! TOML config says, then evaluated on the config's held-out samples.
//!
//! Run: `cargo run --release -p agentfly-examples --bin train_units -- examples/runs/units.toml`
//! (`cargo run --release -- fetch-model` first). Re-running continues from the last checkpoint.

use agentfly_trainer::run::Trainer;

// Name every tool crate once, or the linker drops it and its tools are missing.
agentfly_core::link!(agentfly_tools, agentfly_examples);

// Freed training memory is kept for the next step instead of going back to the OS
// (agentfly_model::alloc).
#[global_allocator]
static ALLOC: agentfly_model::alloc::Allocator = agentfly_model::alloc::Allocator;

fn main() -> anyhow::Result<()> {
    let config = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/runs/units.toml".into());
    let mut trainer = Trainer::from_config_file(&config)?;
    let summary = trainer.train()?;
    println!(
        "trained {} steps; model in {}",
        summary.steps,
        summary.model_dir.display()
    );
    let report = trainer.evaluate(trainer.eval_samples())?;
    println!(
        "held-out accuracy {}/{} ({:.3}, 95% CI {:.3}–{:.3})",
        report.correct, report.samples, report.accuracy, report.interval.0, report.interval.1
    );
    Ok(())
}
