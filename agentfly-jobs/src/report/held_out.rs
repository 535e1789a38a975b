//! Evaluations of the held-out test split: one row each with its 95% Wilson interval, the
//! verdicts (do two rows' intervals overlap? what does the paired test say?) and the
//! accuracy chart.

use super::paired::Paired;
use super::plots::{self, Proportion};
use crate::JobError;
use agentfly_trainer::run::EvalReport;
use std::fmt::Write as _;
use std::path::Path;

/// One evaluation of the test split: its key (the stage's file stem), its row title and
/// the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    /// The stage's key, e.g. `sft`.
    pub key: String,
    /// The row's title, e.g. `after SFT`.
    pub title: String,
    /// The result.
    pub report: EvalReport,
}

/// Two evaluations to compare in the verdict: is `after` clearly better than `before`?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison<'a> {
    /// The key of the later evaluation.
    pub after: &'a str,
    /// The key of the earlier one.
    pub before: &'a str,
    /// What the comparison is, e.g. `RL over SFT`.
    pub what: &'a str,
}

/// The evaluation with `key`, when there is one.
pub fn find<'a>(evals: &'a [Eval], key: &str) -> Option<&'a EvalReport> {
    evals.iter().find(|e| e.key == key).map(|e| &e.report)
}

/// The held-out results as a Markdown table.
pub fn table(evals: &[Eval]) -> String {
    let mut s = String::from(
        "| policy | correct | failed | accuracy | 95% interval | mean reward | answers with a tool call | parse errors per answer | mean turns |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for Eval {
        title, report: r, ..
    } in evals
    {
        let _ = writeln!(
            s,
            "| {title} | {}/{} | {} | {:.3} | {:.3}–{:.3} | {:.3} | {:.0}% | {:.2} | {:.2} |",
            r.correct,
            r.samples,
            r.failures(),
            r.accuracy,
            r.interval.0,
            r.interval.1,
            r.reward_mean,
            r.tool_call_rate * 100.0,
            r.parse_error_rate,
            r.mean_turns
        );
    }
    s
}

/// Do the intervals of `after` and `before` not overlap, `after` above?
pub fn clearly_better(after: &EvalReport, before: &EvalReport) -> bool {
    after.interval.0 > before.interval.1
}

/// One line per comparison whose two evaluations are both there: the two rows, whether
/// their intervals overlap, and, when both hold the same items' trajectories, the paired
/// counts and the exact McNemar test ([`Paired`]) on those `items`.
pub fn verdicts(evals: &[Eval], comparisons: &[Comparison<'_>], items: &str) -> String {
    let mut s = String::new();
    for c in comparisons {
        if let (Some(a), Some(b)) = (find(evals, c.after), find(evals, c.before)) {
            let paired = Paired::of(a, b)
                .map(|p| format!("; {}", p.describe(items)))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "- {}: {}/{} vs {}/{}; 95% intervals {:.3}–{:.3} vs {:.3}–{:.3}: {}{paired}.",
                c.what,
                a.correct,
                a.samples,
                b.correct,
                b.samples,
                a.interval.0,
                a.interval.1,
                b.interval.0,
                b.interval.1,
                if clearly_better(a, b) {
                    "they do not overlap, a clear gain"
                } else {
                    "they overlap, not a clear gain on this split"
                }
            );
        }
    }
    s
}

/// The evaluations' accuracies with their intervals, one column each.
pub fn chart(path: &Path, title: &str, evals: &[Eval]) -> Result<(), JobError> {
    let items: Vec<Proportion> = evals
        .iter()
        .map(|e| Proportion {
            label: e.title.clone(),
            value: e.report.accuracy,
            interval: e.report.interval,
        })
        .collect();
    plots::proportions(path, title, &items)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use agentfly_trainer::run::wilson_interval;

    /// A report of `correct` out of `samples`, without trajectories.
    pub(crate) fn report(correct: usize, samples: usize) -> EvalReport {
        EvalReport {
            samples,
            correct,
            failed: 0,
            first_failure: None,
            accuracy: correct as f64 / samples as f64,
            interval: wilson_interval(correct, samples),
            reward_mean: correct as f64 / samples as f64,
            tool_call_rate: 1.0,
            parse_error_rate: 0.0,
            mean_turns: 2.0,
            summary: Default::default(),
            trajectories: Vec::new(),
        }
    }

    fn eval(key: &str, title: &str, correct: usize) -> Eval {
        Eval {
            key: key.into(),
            title: title.into(),
            report: report(correct, 48),
        }
    }

    #[test]
    fn rows_and_verdicts_follow_the_intervals() {
        let evals = [eval("sft", "after SFT", 20), eval("final", "after RL", 37)];
        let t = table(&evals);
        assert!(
            t.contains("| after SFT | 20/48 | 0 | 0.417 | 0.288–0.557 |"),
            "{t}"
        );
        assert!(
            t.contains("| after RL | 37/48 | 0 | 0.771 | 0.635–0.867 |"),
            "{t}"
        );
        let compare = |after, before| Comparison {
            after,
            before,
            what: "RL over SFT",
        };
        let v = verdicts(
            &evals,
            &[compare("final", "sft"), compare("final", "missing")],
            "problems",
        );
        assert_eq!(v.lines().count(), 1, "{v}");
        assert!(v.contains("a clear gain"), "{v}");
        // Without trajectories there is nothing to pair.
        assert!(!v.contains("paired"), "{v}");
        let close = [eval("sft", "after SFT", 20), eval("final", "after RL", 26)];
        let v = verdicts(&close, &[compare("final", "sft")], "problems");
        assert!(v.contains("they overlap"), "{v}");
    }

    #[test]
    fn overlapping_intervals_can_still_be_a_clear_paired_gain() {
        use agentfly_core::Trajectory;
        // 100 items: 20 solved before; after, those 20 and 12 more (a 32/100 row whose
        // interval overlaps 20/100's), none lost: McNemar p = 2^-11.
        let of = |solved: usize| {
            let trajectories = (0..100)
                .map(|i| Trajectory {
                    sample_id: format!("game-{i}"),
                    reward: Some(f32::from(u8::from(i < solved))),
                    ..Trajectory::default()
                })
                .collect();
            EvalReport::of(trajectories, Default::default())
        };
        let evals = [
            Eval {
                key: "sft".into(),
                title: "after SFT".into(),
                report: of(20),
            },
            Eval {
                key: "final".into(),
                title: "after RL".into(),
                report: of(32),
            },
        ];
        let compare = Comparison {
            after: "final",
            before: "sft",
            what: "RL over SFT",
        };
        let v = verdicts(&evals, &[compare], "games");
        assert!(v.contains("they overlap"), "{v}");
        assert!(
            v.contains(
                "paired on the same 100 games: 12 gained, 0 lost, exact McNemar p = 0.00049, \
                 a clear paired gain."
            ),
            "{v}"
        );
    }
}
