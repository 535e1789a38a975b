//! Two evaluations of the same held-out items, compared item by item: which items one
//! solved and the other did not, and the exact two-sided McNemar test on those discordant
//! items. Where the same items are evaluated before and after training this is the test
//! the design calls for beside the intervals: it is much more sensitive than asking whether
//! two Wilson intervals overlap, because the items both policies solve (or both fail) say
//! nothing about the difference.

use agentfly_trainer::run::{EvalReport, correct_of, failed_of};
use std::collections::BTreeMap;

/// The level below which a paired difference is called clear.
pub const CLEAR_P: f64 = 0.01;

/// Two evaluations of the same items, paired.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// Items both evaluated.
    pub items: usize,
    /// Solved after, not before.
    pub gained: usize,
    /// Solved before, not after.
    pub lost: usize,
    /// The exact two-sided McNemar p-value of `gained` against `lost`.
    pub p: f64,
}

impl Paired {
    /// Pairs `after` with `before` by sample id; `None` unless both hold one trajectory per
    /// item and the same items (an evaluation read from an older run may hold none). A failed
    /// chain counts as not solved, as it does in the accuracy.
    pub fn of(after: &EvalReport, before: &EvalReport) -> Option<Self> {
        Self::of_items(after, before, |_| true)
    }

    /// [`Paired::of`] over the items whose sample id `keep` accepts (a question family,
    /// say); `None` also when it accepts none.
    pub fn of_items(
        after: &EvalReport,
        before: &EvalReport,
        keep: impl Fn(&str) -> bool,
    ) -> Option<Self> {
        fn outcomes<'a>(
            r: &'a EvalReport,
            keep: &impl Fn(&str) -> bool,
        ) -> Option<BTreeMap<&'a str, bool>> {
            let all: BTreeMap<&str, bool> = r
                .trajectories
                .iter()
                .map(|t| (t.sample_id.as_str(), !failed_of(t) && correct_of(t)))
                .collect();
            if all.len() != r.samples || all.len() != r.trajectories.len() {
                return None;
            }
            let kept: BTreeMap<&str, bool> = all.into_iter().filter(|(id, _)| keep(id)).collect();
            (!kept.is_empty()).then_some(kept)
        }
        let (a, b) = (outcomes(after, &keep)?, outcomes(before, &keep)?);
        if !a.keys().eq(b.keys()) {
            return None;
        }
        let (mut gained, mut lost) = (0, 0);
        for (id, solved) in &a {
            match (*solved, b[id]) {
                (true, false) => gained += 1,
                (false, true) => lost += 1,
                _ => {}
            }
        }
        Some(Self {
            items: a.len(),
            gained,
            lost,
            p: mcnemar_exact(gained, lost),
        })
    }

    /// Is `after` clearly better, paired: more gained than lost at p < [`CLEAR_P`]?
    pub fn clear_gain(&self) -> bool {
        self.gained > self.lost && self.p < CLEAR_P
    }

    /// Is `after` clearly worse, paired?
    pub fn clear_loss(&self) -> bool {
        self.lost > self.gained && self.p < CLEAR_P
    }

    /// The short form a table cell gives it: `+12 −3, p = 0.035`.
    pub fn counts(&self) -> String {
        format!("+{} −{}, p = {}", self.gained, self.lost, format_p(self.p))
    }

    /// The sentence a verdict gives it, e.g. `paired on the same 100 items: 12 gained, 3
    /// lost, exact McNemar p = 0.035, not clear at p < 0.01`.
    pub fn describe(&self, items: &str) -> String {
        let judgement = if self.clear_gain() {
            "a clear paired gain"
        } else if self.clear_loss() {
            "a clear paired loss"
        } else {
            "not clear at p < 0.01"
        };
        format!(
            "paired on the same {} {items}: {} gained, {} lost, exact McNemar p = {}, {judgement}",
            self.items,
            self.gained,
            self.lost,
            format_p(self.p)
        )
    }
}

/// A p-value as a report prints it: two significant digits, or `< 1e-6`.
pub fn format_p(p: f64) -> String {
    if p >= 0.01 {
        format!("{p:.2}")
    } else if p >= 1e-6 {
        let digits = (-p.log10()).ceil() as usize + 1;
        format!("{p:.digits$}")
    } else {
        "< 1e-6".into()
    }
}

/// The exact two-sided McNemar test: under the null each of the `b + c` discordant items
/// goes either way with probability ½, so the p-value is twice the smaller binomial tail
/// (at most 1). Summed in log space, so that it holds for any number of items.
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // ln C(n, i) − n ln 2 for i = 0..=k, by the ratio C(n, i+1) / C(n, i) = (n − i) / (i + 1).
    let mut terms = Vec::with_capacity(k + 1);
    let mut ln = -(n as f64) * std::f64::consts::LN_2;
    for i in 0..=k {
        terms.push(ln);
        ln += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tail = max.exp() * terms.iter().map(|t| (t - max).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentfly_core::Trajectory;

    fn report(outcomes: &[(&str, bool)]) -> EvalReport {
        let trajectories = outcomes
            .iter()
            .map(|(id, solved)| Trajectory {
                sample_id: (*id).into(),
                reward: Some(f32::from(u8::from(*solved))),
                reward_metrics: [("correct".to_string(), f64::from(u8::from(*solved)))].into(),
                ..Trajectory::default()
            })
            .collect();
        EvalReport::of(trajectories, Default::default())
    }

    #[test]
    fn exact_p_values_match_the_binomial_tails() {
        // Values of scipy.stats.binomtest(k, n, 0.5).pvalue (two-sided, exact).
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        assert_eq!(mcnemar_exact(3, 3), 1.0);
        assert!((mcnemar_exact(9, 0) - 0.00390625).abs() < 1e-12);
        assert!((mcnemar_exact(12, 3) - 0.03515625).abs() < 1e-12);
        assert!((mcnemar_exact(3, 12) - 0.03515625).abs() < 1e-12);
        assert!((mcnemar_exact(30, 10) - 0.002_221_433_773_229_364).abs() < 1e-12);
        // Thousands of items: no overflow, no underflow to a wrong answer.
        assert!((mcnemar_exact(1000, 1000) - 1.0).abs() < 1e-9);
        let p = mcnemar_exact(1100, 900);
        assert!(p > 0.0 && p < 1e-5, "{p}");
    }

    #[test]
    fn items_are_paired_by_id_and_failures_count_as_unsolved() {
        let before = report(&[("a", true), ("b", false), ("c", false), ("d", true)]);
        let mut after = report(&[("d", false), ("c", true), ("b", true), ("a", true)]);
        let paired = Paired::of(&after, &before).expect("the same items");
        assert_eq!((paired.items, paired.gained, paired.lost), (4, 2, 1));
        assert_eq!(paired.p, 1.0);
        assert!(!paired.clear_gain() && !paired.clear_loss());
        // A failed chain is not solved, whatever its reward said.
        after.trajectories[1].error = Some("lost the world".into());
        after.trajectories[1].finish_reason = agentfly_core::rollout::ChainEnd::Error;
        let paired = Paired::of(&after, &before).expect("the same items");
        assert_eq!((paired.gained, paired.lost), (1, 1));
        assert!(
            paired.describe("games").starts_with(
                "paired on the same 4 games: 1 gained, 1 lost, exact McNemar p = 1.00"
            )
        );
    }

    #[test]
    fn different_items_or_no_trajectories_are_not_paired() {
        let before = report(&[("a", true), ("b", false)]);
        assert!(Paired::of(&report(&[("a", true), ("c", true)]), &before).is_none());
        assert!(Paired::of(&report(&[("a", true)]), &before).is_none());
        let mut bare = before.clone();
        bare.trajectories.clear();
        assert!(Paired::of(&bare, &before).is_none());
    }

    #[test]
    fn a_clear_paired_gain_needs_p_below_the_level() {
        let ids: Vec<String> = (0..40).map(|i| format!("q{i}")).collect();
        let before = report(&ids.iter().map(|i| (i.as_str(), false)).collect::<Vec<_>>());
        let after = report(
            &ids.iter()
                .enumerate()
                .map(|(n, i)| (i.as_str(), n < 9))
                .collect::<Vec<_>>(),
        );
        let paired = Paired::of(&after, &before).unwrap();
        assert!(paired.clear_gain(), "{paired:?}");
        assert!(Paired::of(&before, &after).unwrap().clear_loss());
        assert_eq!(format_p(paired.p), "0.0039");
        assert_eq!(paired.counts(), "+9 −0, p = 0.0039");
        assert_eq!(format_p(0.2), "0.20");
        assert_eq!(format_p(1e-9), "< 1e-6");
    }
}
