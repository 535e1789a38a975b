//! A job's report: its title and set-up paragraph, then the shared sections (held-out
//! table and verdicts, training curves, sample trajectories, times, files).

use super::{Job, Task};
use crate::JobError;
use crate::report::held_out::find;
use crate::report::{Comparison, Report, SampleTrajectories, TrainingCurves};
use crate::run_dir::read_json;
use std::path::{Path, PathBuf};

/// Writes `report/REPORT.md` and its charts from what the run has produced so far; returns
/// the Markdown file's path.
pub fn write(job: &Job) -> Result<PathBuf, JobError> {
    let s = &job.settings;
    let evals = job.evals()?;
    let metrics = job.metrics()?;
    let validation = job.validation()?;
    let sft = job.sft()?;
    let items = s.task.items();
    let (title, disjoint, need) = match s.task {
        Task::Calculator => (
            "Calculator agent: SmolLM2-135M-Instruct learns to use a calculator".to_string(),
            "by normalised question",
            "the problems need the calculator",
        ),
        Task::WikiQa(format) => (
            format!(
                "Wiki agent ({}): SmolLM2-135M-Instruct learns to look answers up",
                match format {
                    super::CallFormat::Hermes => "JSON tool calls",
                    super::CallFormat::Code => "code as action",
                }
            ),
            "by question and by source article",
            "the answers must be looked up",
        ),
        Task::TextWorld => (
            "Text-world agent: SmolLM2-135M-Instruct learns to play TextWorld-Commonsense"
                .to_string(),
            "by game (each split from its own fold's seeds) and by first observation",
            "a game is played only by acting in it",
        ),
    };
    let mut report = Report::new(&job.path("report"), &title, job.run.command())?;
    report.paragraph(&format!(
        "Model `{}` on `{}`; {} preset: {} training, {} validation and {} test {items} (disjoint \
         {disjoint}, checked at load); SFT on {} {} ({} epoch(s), lr {:e}); then {} RL steps of \
         {} {items} × {} chains with {} (lr {:e}, loss {}, seed {}){}. Greedy evaluation, one \
         chain per question, at most {} turns; tools: {}.",
        s.model.display(),
        s.device,
        s.preset,
        s.train,
        s.val,
        s.test,
        s.demos,
        s.task.demos_description(),
        s.sft_epochs,
        s.sft_lr,
        s.steps,
        s.samples_per_step,
        s.chains,
        s.algorithm.name(),
        s.lr,
        loss_terms(s.mask, s.kl_coef),
        s.seed,
        if let Some(reward) = &s.reward {
            let bonus = if s.format_bonus != 0.0 {
                format!(", shaped with a format bonus of {}", s.format_bonus)
            } else {
                String::new()
            };
            format!("; reward `{reward}`{bonus} (accuracy counts its `correct` metric)")
        } else if s.format_bonus != 0.0 {
            format!(
                "; reward shaped with a format bonus of {} (accuracy counts exact answers only)",
                s.format_bonus
            )
        } else if s.task == Task::TextWorld {
            "; reward 1 when the game says the task is complete, else 0 (the game's own score \
             reported apart)"
                .into()
        } else {
            "; reward 1 for the exact answer submitted, else 0".into()
        },
        s.task.chain().max_turns,
        s.task.tools().join(", "),
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
            format!(
                "Without tools the initial model solves {}/{} ({:.0}%): {need}.",
                n.correct,
                n.samples,
                n.accuracy * 100.0
            )
        })
        .into_iter()
        .collect();
    if s.task == Task::TextWorld {
        notes.push(world_scores(&evals));
    }
    report.held_out(
        &evals,
        &notes,
        &[
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
        ],
        &format!("test accuracy ({} held-out {items})", s.test),
    )?;
    report.training(&TrainingCurves {
        metrics: &metrics,
        validation: &validation,
        validation_size: s.val,
        chains: s.chains,
        reward_top: 1.0 + f64::from(s.format_bonus.max(0.0)),
        shaped: s.format_bonus != 0.0,
        kl_tracked: s
            .trainer_config(&s.model, Path::new(""), true)
            .train
            .measures_kl(),
    })?;
    if let Some(sft) = &sft {
        report.sft(sft);
    }
    report.sample_trajectories(
        &evals,
        &SampleTrajectories {
            context: &[("initial", "Initial policy")],
            before: ("sft", "After SFT (before RL)"),
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

/// The games' own score (0 to 1: the share of the objects put where they belong), its mean
/// over each evaluation's games, reported apart from success.
fn world_scores(evals: &[crate::report::Eval]) -> String {
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
    format!(
        "The game's own score (the share of the task done, 0 to 1), mean over the games: {}.",
        means.join(", ")
    )
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
