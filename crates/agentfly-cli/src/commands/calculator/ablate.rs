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
/// writes `ablations/ABLATIONS.md` over all finished runs.
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
    // Seed by seed, so that an interrupted sweep leaves every variant equally far along.
    let total = chosen.len() as u64 * args.seeds;
    let mut done = 0;
    for seed in 1..=args.seeds {
        for &&(variant, algorithm, mask) in &chosen {
            done += 1;
            let dir = main.path(&format!("ablations/{variant}-seed{seed}"));
            if dir.join("final.json").exists() {
                continue;
            }
            eprintln!("ablation {done}/{total}: {variant}, seed {seed}");
            let settings = Settings {
                algorithm,
                mask,
                seed,
                ..main.settings.clone()
            };
            let report = one_run(&dir, &settings, &sft_model, &test)?;
            write(&dir.join("final.json"), &serde_json::to_string(&report)?)?;
            // A finished run needs no checkpoints (1.6 GB each); its model stays in out/model.
            let checkpoints = dir.join("out/checkpoints");
            std::fs::remove_dir_all(&checkpoints)
                .with_context(|| format!("removing {}", checkpoints.display()))?;
            eprintln!(
                "    {variant} seed {seed}: {}/{} ({:.3}–{:.3})",
                report.correct, report.samples, report.interval.0, report.interval.1
            );
        }
    }
    let outcomes = finished(&main.path("ablations"))?;
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

/// Every finished ablation run in `dir` (any seed), in the variants' order.
fn finished(dir: &Path) -> anyhow::Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for (variant, _, _) in VARIANTS {
        for seed in 1.. {
            let path = dir.join(format!("{variant}-seed{seed}/final.json"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                if dir.join(format!("{variant}-seed{seed}")).exists() {
                    continue; // started, not finished
                }
                break;
            };
            let report = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push(Outcome {
                variant,
                seed,
                report,
            });
        }
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(correct: usize, samples: usize) -> EvalReport {
        EvalReport {
            samples,
            correct,
            accuracy: correct as f64 / samples as f64,
            interval: wilson_interval(correct, samples),
            reward_mean: 0.0,
            tool_call_rate: 1.0,
            parse_error_rate: 0.0,
            mean_turns: 2.0,
            summary: Default::default(),
            trajectories: Vec::new(),
        }
    }

    #[test]
    fn the_summary_pools_every_finished_run_and_skips_unfinished_ones() {
        let dir = tempfile::tempdir().unwrap();
        let put = |name: &str, r: Option<EvalReport>| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            if let Some(r) = r {
                std::fs::write(d.join("final.json"), serde_json::to_string(&r).unwrap()).unwrap();
            }
        };
        put("grpo-seed1", Some(report(30, 48)));
        put("grpo-seed2", None); // interrupted
        put("grpo-seed3", Some(report(36, 48)));
        put("rloo-seed1", Some(report(20, 48)));
        let outcomes = finished(dir.path()).unwrap();
        let got: Vec<(&str, u64)> = outcomes.iter().map(|o| (o.variant, o.seed)).collect();
        assert_eq!(got, [("grpo", 1), ("grpo", 3), ("rloo", 1)]);
        let s = Settings::from_args(
            &<RunArgsCli as clap::Parser>::parse_from(["x"]).args,
            "/m".into(),
        );
        let md = summary("agentfly calculator ablate", &s, None, &outcomes);
        let (lo, hi) = wilson_interval(66, 96);
        assert!(
            md.contains(&format!(
                "| grpo | 2 | s1: 30/48, s3: 36/48 | 66/96 | 0.688 | {lo:.3}–{hi:.3} |"
            )),
            "{md}"
        );
        assert!(md.contains("| rloo | 1 | s1: 20/48 | 20/48 |"), "{md}");
        assert!(!md.contains("| ppo |"), "{md}");
    }

    #[derive(clap::Parser)]
    struct RunArgsCli {
        #[command(flatten)]
        args: RunArgs,
    }
}
