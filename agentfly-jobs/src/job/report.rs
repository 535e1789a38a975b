//! A job's report: its title and set-up paragraph, then the shared sections (held-out
//! table and verdicts, training curves, sample trajectories, times, files).

use super::Job;
use crate::JobError;
use crate::report::held_out::find;
use crate::report::{Comparison, Report, SampleTrajectories, TrainingCurves};
use crate::run_dir::read_json;
use std::path::{Path, PathBuf};

/// Writes `report/REPORT.md` and its charts from what the run has produced so far; returns
/// the Markdown file's path.
pub fn write(job: &Job) -> Result<PathBuf, JobError> {
    let s = &job.spec;
    let words = &s.report;
    let evals = job.evals()?;
    let metrics = job.metrics()?;
    let validation = job.validation()?;
    let sft = job.sft()?;
    let items = &s.task.items;
    let count = |split: &str| job.split_if_given(split).map(|d| d.len());
    let (train, val, test, demos) = (
        count("train")?,
        count("val")?,
        count("test")?,
        count("demos")?,
    );
    let title = words.title.clone().unwrap_or_else(|| {
        let model = s
            .model
            .path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy();
        format!("{} agent: {model} trained with agentfly", s.task.name)
    });
    let config = s.trainer_config(Path::new(""));
    let warm_start = match &config.sft {
        Some(sft) => format!(
            "SFT on {demos} {} ({} epoch(s), lr {:e}); then ",
            words.demos.as_deref().unwrap_or("demonstrations"),
            sft.epochs,
            sft.lr
        ),
        None => "no SFT; ".into(),
    };
    let bonus = s.agent.format_bonus;
    let reward = words.reward.clone().unwrap_or_else(|| {
        let shaped = if bonus != 0.0 {
            format!(", shaped with a format bonus of {bonus}")
        } else {
            String::new()
        };
        format!("reward `{}`{shaped}", s.agent.reward)
    });
    let mut report = Report::new(&job.path("report"), &title, job.run.command())?;
    report.paragraph(&format!(
        "Model `{}` on `{}`; {} preset: {train} training, {val} validation and {test} test \
         {items} (disjoint {}, checked at load); {warm_start}{} RL steps of {} {items} × {} \
         chains with {} (lr {:e}, loss {}, seed {}); {reward}. Greedy evaluation, one chain \
         per question, at most {} turns; tools: {}.",
        s.model.path.display(),
        s.model.device,
        s.task.preset,
        words.disjoint.as_deref().unwrap_or("by question"),
        s.train.steps,
        s.rollout.samples_per_step,
        s.rollout.chains,
        s.algorithm_name(),
        s.optim.lr,
        loss_terms(s.algorithm.mask, s.train.loss.kl_coef),
        s.train.seed,
        s.chain.max_turns,
        s.tools_description(),
    ));
    if let Some(isolation) =
        read_json::<agentfly_envs::python::Isolation>(&job.path(super::SANDBOX_FILE))?
    {
        report.paragraph(&format!(
            "Model-written code ran in the Python sandbox, a fresh interpreter per chain; on \
             this machine: {}.",
            isolation.describe()
        ));
    }
    let mut notes: Vec<String> = find(&evals, "no_tools")
        .map(|n| {
            let shows = words
                .closed_book
                .as_ref()
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            format!(
                "Without tools the initial model solves {}/{} ({:.0}%){shows}.",
                n.correct,
                n.samples,
                n.accuracy * 100.0
            )
        })
        .into_iter()
        .collect();
    if let Some(score) = &words.score {
        notes.push(scores(&evals, score, items));
    }
    // With SFT, RL is measured against the policy it started from: the one after SFT.
    let comparisons = if config.sft.is_some() {
        vec![
            Comparison {
                after: "final",
                before: "sft",
                what: "RL over SFT",
            },
            Comparison {
                after: "sft",
                before: "initial",
                what: "SFT over the initial policy",
            },
        ]
    } else {
        vec![Comparison {
            after: "final",
            before: "initial",
            what: "RL over the initial policy",
        }]
    };
    report.held_out(
        &evals,
        &notes,
        &comparisons,
        items,
        &format!("test accuracy ({test} held-out {items})"),
    )?;
    report.training(&TrainingCurves {
        metrics: &metrics,
        validation: &validation,
        validation_size: val,
        chains: s.rollout.chains,
        reward_top: 1.0 + f64::from(bonus.max(0.0)),
        shaped: bonus != 0.0,
        kl_tracked: s.train.measures_kl(),
    })?;
    if let Some(sft) = &sft {
        report.sft(sft);
    }
    let before = if config.sft.is_some() {
        ("sft", "After SFT (before RL)")
    } else {
        ("initial", "Initial policy (before RL)")
    };
    report.sample_trajectories(
        &evals,
        &SampleTrajectories {
            context: if config.sft.is_some() {
                &[("initial", "Initial policy")]
            } else {
                &[]
            },
            before,
            after: ("final", "After RL"),
            samples: &job.split("test")?,
            question: "question",
            answer: "answer",
        },
    );
    report.times(&evals, sft.as_ref(), &metrics, &validation);
    report.files(&[]);
    report.write()
}

/// The reward's `score` metric (`what` it is), its mean over each evaluation's `items`,
/// reported apart from accuracy.
fn scores(evals: &[crate::report::Eval], what: &str, items: &str) -> String {
    let means: Vec<String> = evals
        .iter()
        .map(|e| {
            let scores: Vec<f64> = e
                .report
                .trajectories
                .iter()
                .filter_map(|t| t.reward_metrics.get("score").copied())
                .collect();
            let mean = scores.iter().sum::<f64>() / scores.len().max(1) as f64;
            format!("{} {mean:.2}", e.title)
        })
        .collect();
    format!("{what}, mean over the {items}: {}.", means.join(", "))
}

/// What RL's loss is taken on, and its KL penalty when it has one.
fn loss_terms(mask: bool, kl_coef: f32) -> String {
    let tokens = if mask {
        "on the model's own tokens"
    } else {
        "on every token after the prompt (mask off)"
    };
    if kl_coef == 0.0 {
        tokens.into()
    } else {
        format!("{tokens}, KL penalty {kl_coef} to the policy RL started from")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_loss_is_described_with_its_kl_penalty_only_when_there_is_one() {
        assert_eq!(super::loss_terms(true, 0.0), "on the model's own tokens");
        assert_eq!(
            super::loss_terms(false, 0.1),
            "on every token after the prompt (mask off), KL penalty 0.1 to the policy RL \
             started from"
        );
    }
}
