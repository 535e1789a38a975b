//! GRPO: the group's mean (and standard deviation) as the baseline.

use super::scored::{STD_EPS, Scored, groups, mean};

/// One advantage per item: GRPO. A group of one (its other chains failed) has no
/// baseline to compare with, so it teaches nothing: advantage 0, not its raw reward.
pub fn grpo(items: &[Scored<'_>], normalize_std: bool) -> Vec<f32> {
    let mut out = vec![0.0; items.len()];
    for group in groups(items) {
        let rewards: Vec<f32> = group.iter().map(|&i| items[i].reward).collect();
        if rewards.len() == 1 {
            continue;
        }
        let m = mean(&rewards);
        let var = rewards.iter().map(|r| (r - m).powi(2)).sum::<f32>() / (rewards.len() - 1) as f32;
        for (&i, r) in group.iter().zip(&rewards) {
            out[i] = if normalize_std {
                (r - m) / (var.sqrt() + STD_EPS)
            } else {
                r - m
            };
        }
    }
    out
}
