//! `agentfly calculator ablate`: loss masking on vs off, and GRPO vs RLOO vs REINFORCE++
//! vs PPO, several seeds each. Every run starts from the main run's model after SFT and
//! gets the main run's RL budget (steps, problems and chains per step); each is judged by
//! greedy accuracy on the same held-out test split. Runs resume like the main job.

use super::pipeline::{self, EVALS};
use super::{Algorithm, RunArgs, Settings, prepare, write};
use agentfly_core::data::read_jsonl;
use agentfly_trainer::run::{EvalReport, SFT_MODEL, Trainer, TrainerConfig, wilson_interval};
use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// Options of `agentfly calculator ablate`.
#[derive(clap::Args, Debug)]
pub struct AblateArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Seeds per variant (seeds 1..=N; the main run keeps its own).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The variants to run (default: all).
    #[arg(long, value_delimiter = ',', value_parser = VARIANTS.map(|v| v.0))]
    variants: Vec<String>,
}

/// The variants: name, algorithm, loss mask.
pub const VARIANTS: [(&str, Algorithm, bool); 5] = [
    ("grpo", Algorithm::Grpo, true),
    ("grpo-no-mask", Algorithm::Grpo, false),
    ("rloo", Algorithm::Rloo, true),
    ("reinforce++", Algorithm::ReinforcePlusPlus, true),
    ("ppo", Algorithm::Ppo, true),
];

/// One finished ablation run.
struct Outcome {
    variant: &'static str,
    seed: u64,
    report: EvalReport,
}

/// Runs the main job (up to its end, resuming), then every ablation run not done yet, then
/// writes `ablations/ABLATIONS.md`.
pub fn run(args: AblateArgs) -> anyhow::Result<ExitCode> {
    let main = prepare(&args.run)?;
    pipeline::run(&main)?;
    let sft_model = main.path("out").join(SFT_MODEL);
    if !sft_model.join("config.json").exists() {
        bail!(
            "{}: the main run has no model after SFT",
            sft_model.display()
        );
    }
    let test = read_jsonl(main.path("data/test.jsonl"))?;
    let chosen: Vec<_> = VARIANTS
        .iter()
        .filter(|v| args.variants.is_empty() || args.variants.iter().any(|n| n == v.0))
        .collect();
    let mut outcomes = Vec::new();
    let total = chosen.len() as u64 * args.seeds;
    let mut done = 0;
    for &&(variant, algorithm, mask) in &chosen {
        for seed in 1..=args.seeds {
            done += 1;
            let dir = main.path(&format!("ablations/{variant}-seed{seed}"));
            let result = dir.join("final.json");
            let report: EvalReport = match std::fs::read_to_string(&result) {
                Ok(text) => serde_json::from_str(&text)
                    .with_context(|| format!("reading {}", result.display()))?,
                Err(_) => {
                    eprintln!("ablation {done}/{total}: {variant}, seed {seed}");
                    let settings = Settings {
                        algorithm,
                        mask,
                        seed,
                        ..main.settings.clone()
                    };
                    let report = one_run(&dir, &settings, &sft_model, &test)?;
                    write(&result, &serde_json::to_string(&report)?)?;
                    report
                }
            };
            eprintln!(
                "    {variant} seed {seed}: {}/{} ({:.3}–{:.3})",
                report.correct, report.samples, report.interval.0, report.interval.1
            );
            outcomes.push(Outcome {
                variant,
                seed,
                report,
            });
        }
    }
    let baseline = super::report::load_evals(&main)?
        .into_iter()
        .find(|e| e.0 == EVALS[2].0)
        .map(|e| e.2);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let md = summary(&command, &main.settings, baseline.as_ref(), &outcomes);
    let path = main.path("ablations/ABLATIONS.md");
    write(&path, &md)?;
    println!("{md}");
    eprintln!("written to {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// RL from the SFT model with `settings`, then greedy accuracy on the test split.
fn one_run(
    dir: &Path,
    settings: &Settings,
    sft_model: &Path,
    test: &[agentfly_core::data::Sample],
) -> anyhow::Result<EvalReport> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config_path = dir.join("run.toml");
    write(
        &config_path,
        &settings.trainer_toml(sft_model, "../../data", false),
    )?;
    let config = TrainerConfig::load(&config_path)?;
    let mut trainer = Trainer::new(config)?;
    trainer.train()?;
    Ok(trainer.evaluate(test)?)
}

/// The Markdown table: every run, then each variant's runs pooled.
fn summary(
    command: &str,
    s: &Settings,
    baseline: Option<&EvalReport>,
    outcomes: &[Outcome],
) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Calculator ablations\n\nMade by `{command}`. Every run starts from the main run's \
         policy after SFT and trains {} RL steps of {} problems × {} chains (lr {:e}); \
         accuracy is greedy on the {} held-out test problems.\n",
        s.steps, s.samples_per_step, s.chains, s.lr, s.test
    );
    if let Some(b) = baseline {
        let _ = writeln!(
            md,
            "Starting point (after SFT): {}/{} = {:.3} (95% CI {:.3}–{:.3}).\n",
            b.correct, b.samples, b.accuracy, b.interval.0, b.interval.1
        );
    }
    let _ = writeln!(
        md,
        "| variant | runs | accuracy per seed | pooled correct | pooled accuracy | 95% interval (pooled) |\n|---|---|---|---|---|---|"
    );
    for (name, _, _) in VARIANTS {
        let runs: Vec<&Outcome> = outcomes.iter().filter(|o| o.variant == name).collect();
        if runs.is_empty() {
            continue;
        }
        let (k, n) = runs.iter().fold((0, 0), |(k, n), o| {
            (k + o.report.correct, n + o.report.samples)
        });
        let (lo, hi) = wilson_interval(k, n);
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {k}/{n} | {:.3} | {lo:.3}–{hi:.3} |",
            runs.len(),
            runs.iter()
                .map(|o| format!("s{}: {}/{}", o.seed, o.report.correct, o.report.samples))
                .collect::<Vec<_>>()
                .join(", "),
            k as f64 / n.max(1) as f64,
        );
    }
    md
}
