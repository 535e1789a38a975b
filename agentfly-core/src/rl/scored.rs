//! What an estimator needs of each trajectory, and the helpers they share: groups, means,
//! advantages put on the sampled tokens.

use crate::rollout::Trajectory;
use std::collections::BTreeMap;

/// Added to a standard deviation before dividing by it.
pub const STD_EPS: f32 = 1e-6;

/// What an estimator needs of one trajectory.
#[derive(Debug, Clone, Copy)]
pub struct Scored<'a> {
    /// Its group (the sample it came from).
    pub group: &'a str,
    /// Its reward.
    pub reward: f32,
    /// Its loss mask.
    pub mask: &'a [u8],
}

impl<'a> Scored<'a> {
    /// The view of a trajectory (a missing reward counts as 0).
    pub fn of(t: &'a Trajectory) -> Self {
        Self {
            group: &t.sample_id,
            reward: t.reward.unwrap_or(0.0),
            mask: &t.loss_mask,
        }
    }
}

/// Indices of the items of each group, groups in order of first appearance.
pub fn groups(items: &[Scored<'_>]) -> Vec<Vec<usize>> {
    let mut order: Vec<&str> = Vec::new();
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let entry = members.entry(item.group).or_default();
        if entry.is_empty() {
            order.push(item.group);
        }
        entry.push(i);
    }
    order
        .into_iter()
        .map(|g| members.remove(g).unwrap_or_default())
        .collect()
}

pub(super) fn mean(xs: &[f32]) -> f32 {
    xs.iter().sum::<f32>() / xs.len() as f32
}

/// Puts each item's advantage on its sampled tokens.
pub fn broadcast(items: &[Scored<'_>], values: &[f32]) -> Vec<Vec<f32>> {
    items
        .iter()
        .zip(values)
        .map(|(item, &a)| {
            item.mask
                .iter()
                .map(|&m| if m == 1 { a } else { 0.0 })
                .collect()
        })
        .collect()
}
