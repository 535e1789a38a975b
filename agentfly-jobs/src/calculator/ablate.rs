//! `agentfly calculator ablate`: loss masking on vs off, and GRPO vs RLOO vs REINFORCE++
//! vs PPO, several seeds each. Every run starts from the main run's model after SFT and
//! gets the main run's RL budget (steps, problems and chains per step); each is judged by
//! greedy accuracy on the same held-out test split. Runs resume like the main job.

use super::options::{AblateArgs, VARIANTS};
use crate::JobError;
use crate::job::{Job, Settings, pipeline};
use crate::report::held_out::find;
use crate::run_dir::read_json;
use agentfly_trainer::run::{EvalReport, wilson_interval};
use std::fmt::Write as _;
use std::path::Path;

/// One finished ablation run.
#[derive(Debug)]
struct Outcome {
    variant: &'static str,
    seed: u64,
    report: EvalReport,
}

/// Runs the main job (up to its end, resuming), then every ablation run not done yet, then
/// writes `ablations/ABLATIONS.md` over all finished runs and prints it.
pub fn run(args: &AblateArgs) -> Result<(), JobError> {
    let main = Job::prepare(&args.run)?;
    pipeline::run(&main)?;
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
            let dir = main.path(format!("ablations/{variant}-seed{seed}"));
            if dir.join("final.json").exists() {
                continue;
            }
            eprintln!("ablation {done}/{total}: {variant}, seed {seed}");
            let settings = Settings {
                algorithm,
                mask,
                seed,
                ..main.builtin()?.clone()
            };
            let report = main.variant(&dir, &settings)?;
            eprintln!(
                "    {variant} seed {seed}: {}/{} ({:.3}–{:.3})",
                report.correct, report.samples, report.interval.0, report.interval.1
            );
        }
    }
    let outcomes = finished(&main.path("ablations"))?;
    let evals = main.evals()?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let md = summary(&command, main.builtin()?, find(&evals, "sft"), &outcomes);
    let path = main.path("ablations/ABLATIONS.md");
    crate::run_dir::write(&path, &md)?;
    println!("{md}");
    eprintln!("written to {}", path.display());
    Ok(())
}

/// Every finished ablation run in `dir` (any seed), in the variants' order.
fn finished(dir: &Path) -> Result<Vec<Outcome>, JobError> {
    let mut out = Vec::new();
    for (variant, _, _) in VARIANTS {
        for seed in 1.. {
            let run = dir.join(format!("{variant}-seed{seed}"));
            match read_json(&run.join("final.json"))? {
                Some(report) => out.push(Outcome {
                    variant,
                    seed,
                    report,
                }),
                None if run.exists() => continue, // started, not finished
                None => break,
            }
        }
    }
    Ok(out)
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
        "# Calculator ablations\n\nMade by `agentfly calculator ablate` over one run \
         directory; the table pools every finished run, whichever invocation made it (the \
         last: `{command}`). Every run starts from the main run's policy after SFT and trains \
         {} RL steps of {} problems × {} chains (lr {:e}); accuracy is greedy on the {} \
         held-out test problems.\n",
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
        "| variant | runs | accuracy per seed | seeds' mean ± sd (min–max) | pooled correct | failed | pooled accuracy | 95% interval (pooled) |\n|---|---|---|---|---|---|---|---|"
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
            "| {name} | {} | {} | {} | {k}/{n} | {} | {:.3} | {lo:.3}–{hi:.3} |",
            runs.len(),
            runs.iter()
                .map(|o| format!("s{}: {}/{}", o.seed, o.report.correct, o.report.samples))
                .collect::<Vec<_>>()
                .join(", "),
            spread(&runs),
            runs.iter().map(|o| o.report.failures()).sum::<usize>(),
            k as f64 / n.max(1) as f64,
        );
    }
    md
}

/// The seeds' accuracies: their mean ± sample standard deviation and their range (the
/// spread a pooled interval hides); the accuracy alone for one seed.
fn spread(runs: &[&Outcome]) -> String {
    let acc: Vec<f64> = runs.iter().map(|o| o.report.accuracy).collect();
    let n = acc.len() as f64;
    let mean = acc.iter().sum::<f64>() / n;
    if acc.len() < 2 {
        return format!("{mean:.3}");
    }
    let sd = (acc.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let (min, max) = acc
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &a| {
            (lo.min(a), hi.max(a))
        });
    format!("{mean:.3} ± {sd:.3} ({min:.3}–{max:.3})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calculator::options::RunArgs;
    use crate::report::held_out::tests::report;

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
        let s = Settings::from_args(&RunArgs::default(), "/m".into());
        let md = summary("agentfly calculator ablate", &s, None, &outcomes);
        let (lo, hi) = wilson_interval(66, 96);
        assert!(
            md.contains(&format!(
                "| grpo | 2 | s1: 30/48, s3: 36/48 | 0.688 ± 0.088 (0.625–0.750) | 66/96 | 0 | 0.688 | {lo:.3}–{hi:.3} |"
            )),
            "{md}"
        );
        assert!(
            md.contains("| rloo | 1 | s1: 20/48 | 0.417 | 20/48 | 0 |"),
            "{md}"
        );
        assert!(!md.contains("| ppo |"), "{md}");
    }
}
