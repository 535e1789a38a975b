//! RLOO: the mean of the group's other chains as the baseline.

use super::scored::{Scored, groups};

/// One advantage per item: RLOO. A group of one has no baseline: advantage 0.
pub fn rloo(items: &[Scored<'_>]) -> Vec<f32> {
    let mut out = vec![0.0; items.len()];
    for group in groups(items) {
        let n = group.len();
        let total: f32 = group.iter().map(|&i| items[i].reward).sum();
        for &i in &group {
            out[i] = if n == 1 {
                0.0
            } else {
                items[i].reward - (total - items[i].reward) / (n - 1) as f32
            };
        }
    }
    out
}
