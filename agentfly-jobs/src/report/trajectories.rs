//! Sample trajectories as the model wrote them, with what the tools answered: a few test
//! samples that training fixed and one it still gets wrong, each shown before and after.

use super::held_out::{Eval, find};
use agentfly_core::Sample;
use agentfly_core::rollout::Trajectory;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Which evaluations the section compares, and where a sample's question and answer are.
#[derive(Debug, Clone, Copy)]
pub struct SampleTrajectories<'a> {
    /// Evaluations shown first for context (e.g. the initial policy), by key.
    pub context: &'a [(&'a str, &'a str)],
    /// The evaluation before training (key, heading).
    pub before: (&'a str, &'a str),
    /// The evaluation after training (key, heading).
    pub after: (&'a str, &'a str),
    /// The test samples.
    pub samples: &'a [Sample],
    /// The field holding a sample's question.
    pub question: &'a str,
    /// The field holding its expected answer.
    pub answer: &'a str,
}

/// Was the trajectory's task solved (its reward's `correct` metric)?
fn right(t: &Trajectory) -> bool {
    t.reward_metrics.get("correct").is_some_and(|c| *c > 0.5)
}

fn by_id(evals: &[Eval], key: &str) -> Option<BTreeMap<String, Trajectory>> {
    find(evals, key).map(|r| {
        r.trajectories
            .iter()
            .map(|t| (t.sample_id.clone(), t.clone()))
            .collect()
    })
}

impl SampleTrajectories<'_> {
    /// The section's Markdown: up to three samples fixed by training and one still wrong;
    /// nothing when either evaluation is missing.
    pub fn markdown(&self, evals: &[Eval]) -> String {
        let (Some(before), Some(after)) = (by_id(evals, self.before.0), by_id(evals, self.after.0))
        else {
            return String::new();
        };
        let mut chosen: Vec<&String> = after
            .iter()
            .filter(|(id, t)| right(t) && before.get(*id).is_some_and(|b| !right(b)))
            .map(|(id, _)| id)
            .take(3)
            .collect();
        chosen.extend(
            after
                .iter()
                .filter(|(_, t)| !right(t))
                .map(|(id, _)| id)
                .take(1),
        );
        if chosen.is_empty() {
            return String::new();
        }
        let context: Vec<(&str, BTreeMap<String, Trajectory>)> = self
            .context
            .iter()
            .filter_map(|(key, heading)| Some((*heading, by_id(evals, key)?)))
            .collect();
        let samples: BTreeMap<&str, &Sample> =
            self.samples.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut md = String::from("## Sample trajectories (test problems)\n\n");
        for id in chosen {
            let Some(sample) = samples.get(id.as_str()) else {
                continue;
            };
            let field = |k: &str| {
                sample
                    .field(k)
                    .map(|v| v.as_str().map_or(v.to_string(), str::to_string))
                    .unwrap_or_default()
            };
            let _ = writeln!(
                md,
                "### `{id}`: {}\n\nExpected answer: **{}**\n",
                field(self.question),
                field(self.answer)
            );
            let mut show = |heading: &str, t: Option<&Trajectory>| {
                if let Some(t) = t {
                    let _ = writeln!(
                        md,
                        "{heading} — {}:\n\n```text\n{}```\n",
                        if right(t) { "right" } else { "wrong" },
                        t.transcript()
                    );
                }
            };
            for (heading, trajectories) in &context {
                show(heading, trajectories.get(id));
            }
            show(self.before.1, before.get(id));
            show(self.after.1, after.get(id));
        }
        md
    }
}
