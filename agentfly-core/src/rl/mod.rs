//! Advantage estimators and group filtering, on plain numbers (no tensors).
//!
//! Every estimator returns one advantage per token of each trajectory, non-zero only
//! where the loss mask is 1: the tokens the model sampled. Observation tokens (mask 0)
//! are not steps of the decision process: returns and GAE run over the model's own tokens
//! only, skipping them.
//!
//! | estimator | baseline | granularity |
//! |---|---|---|
//! | [`Estimator::Grpo`] | mean (and std) of the sample's group | one value per trajectory |
//! | [`Estimator::Rloo`] | mean of the *other* chains of the group | one value per trajectory |
//! | [`Estimator::ReinforcePlusPlus`] | none; token returns with a per-token KL penalty, whitened over the batch | per token |
//! | [`Estimator::Gae`] | a critic's values | per token |

use crate::rollout::Trajectory;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Added to a standard deviation before dividing by it.
pub const STD_EPS: f32 = 1e-6;

/// How advantages are computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Estimator {
    /// `(r - mean(group)) / (std(group) + eps)`; `normalize_std = false` keeps `r - mean`
    /// (Dr. GRPO). The standard deviation is the sample one (n - 1), as in verl.
    Grpo {
        /// Divide by the group's standard deviation.
        #[serde(default = "yes")]
        normalize_std: bool,
    },
    /// `r_i - mean_{j != i}(r_j)`: the leave-one-out baseline.
    Rloo {},
    /// Token returns of the reward at the last sampled token minus `kl_coef` times each
    /// token's KL estimate, discounted by `gamma` over sampled tokens, whitened over the
    /// batch.
    ReinforcePlusPlus {
        /// Discount per sampled token.
        #[serde(default = "one")]
        gamma: f32,
        /// Weight of the per-token KL penalty in the reward.
        #[serde(default)]
        kl_coef: f32,
    },
    /// Generalised advantage estimation with a critic (PPO).
    Gae {
        /// Discount per sampled token.
        #[serde(default = "one")]
        gamma: f32,
        /// GAE's λ.
        #[serde(default = "one")]
        lambda: f32,
    },
}

fn yes() -> bool {
    true
}

fn one() -> f32 {
    1.0
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator::Grpo {
            normalize_std: true,
        }
    }
}

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

/// The advantages of a batch, and the returns a critic regresses to (GAE only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Advantages {
    /// Per trajectory, per token (0 where the mask is 0).
    pub advantages: Vec<Vec<f32>>,
    /// Per trajectory, per token: the value targets (GAE), else empty.
    pub returns: Vec<Vec<f32>>,
}

/// An estimator was given inputs it cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RlError(pub String);

impl Estimator {
    /// Does it need a critic's values?
    pub fn needs_values(&self) -> bool {
        matches!(self, Estimator::Gae { .. })
    }

    /// Does it need per-token KL estimates?
    pub fn needs_kl(&self) -> bool {
        matches!(self, Estimator::ReinforcePlusPlus { kl_coef, .. } if *kl_coef != 0.0)
    }

    /// Computes the advantages of `items`. `kl` (REINFORCE++ with a KL penalty) and
    /// `values` (GAE) hold one number per token of each item.
    pub fn compute(
        &self,
        items: &[Scored<'_>],
        kl: Option<&[Vec<f32>]>,
        values: Option<&[Vec<f32>]>,
    ) -> Result<Advantages, RlError> {
        let per_token =
            |name: &str, given: Option<&[Vec<f32>]>| -> Result<Vec<Vec<f32>>, RlError> {
                let given = given.ok_or_else(|| RlError(format!("{name} are required")))?;
                if given.len() != items.len()
                    || given
                        .iter()
                        .zip(items)
                        .any(|(g, i)| g.len() != i.mask.len())
                {
                    return Err(RlError(format!(
                        "{name} must have one number per token of each trajectory"
                    )));
                }
                Ok(given.to_vec())
            };
        Ok(match *self {
            Estimator::Grpo { normalize_std } => Advantages {
                advantages: broadcast(items, &grpo(items, normalize_std)),
                returns: Vec::new(),
            },
            Estimator::Rloo {} => Advantages {
                advantages: broadcast(items, &rloo(items)),
                returns: Vec::new(),
            },
            Estimator::ReinforcePlusPlus { gamma, kl_coef } => {
                let kl = if kl_coef != 0.0 {
                    per_token("KL estimates", kl)?
                } else {
                    items.iter().map(|i| vec![0.0; i.mask.len()]).collect()
                };
                Advantages {
                    advantages: reinforce_pp(items, &kl, kl_coef, gamma),
                    returns: Vec::new(),
                }
            }
            Estimator::Gae { gamma, lambda } => {
                let values = per_token("critic values", values)?;
                let (advantages, returns) = gae(items, &values, gamma, lambda);
                Advantages {
                    advantages,
                    returns,
                }
            }
        })
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

fn mean(xs: &[f32]) -> f32 {
    xs.iter().sum::<f32>() / xs.len() as f32
}

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

/// REINFORCE++: per sampled token t, `G_t = Σ_{k ≥ t} γ^(k-t) r_k` over sampled tokens,
/// with `r_k = -kl_coef · kl_k` plus the reward on the last sampled token; then whitened
/// (mean 0, std 1) over every sampled token of the batch.
pub fn reinforce_pp(
    items: &[Scored<'_>],
    kl: &[Vec<f32>],
    kl_coef: f32,
    gamma: f32,
) -> Vec<Vec<f32>> {
    let mut out: Vec<Vec<f32>> = items.iter().map(|i| vec![0.0; i.mask.len()]).collect();
    for ((item, kl), row) in items.iter().zip(kl).zip(&mut out) {
        let steps: Vec<usize> = (0..item.mask.len())
            .filter(|&t| item.mask[t] == 1)
            .collect();
        let mut g = 0.0;
        for (n, &t) in steps.iter().enumerate().rev() {
            let mut r = -kl_coef * kl[t];
            if n + 1 == steps.len() {
                r += item.reward;
            }
            g = r + gamma * g;
            row[t] = g;
        }
    }
    whiten(items, &mut out);
    out
}

/// Mean 0, standard deviation 1 over the sampled tokens of the whole batch.
fn whiten(items: &[Scored<'_>], values: &mut [Vec<f32>]) {
    let sampled: Vec<f32> = items
        .iter()
        .zip(values.iter())
        .flat_map(|(i, v)| {
            i.mask
                .iter()
                .zip(v)
                .filter(|(m, _)| **m == 1)
                .map(|(_, x)| *x)
        })
        .collect();
    if sampled.is_empty() {
        return;
    }
    let m = mean(&sampled);
    let std = (sampled.iter().map(|x| (x - m).powi(2)).sum::<f32>() / sampled.len() as f32).sqrt();
    for (item, row) in items.iter().zip(values.iter_mut()) {
        for (x, &mask) in row.iter_mut().zip(item.mask) {
            *x = if mask == 1 {
                (*x - m) / (std + STD_EPS)
            } else {
                0.0
            };
        }
    }
}

/// GAE over the sampled tokens of each item: the reward comes at the last sampled token,
/// `δ_t = r_t + γ V(next sampled token) − V(t)` (0 after the last), `A_t = δ_t + γλ A_next`.
/// Returns the advantages and the value targets `A + V`.
pub fn gae(
    items: &[Scored<'_>],
    values: &[Vec<f32>],
    gamma: f32,
    lambda: f32,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut advantages = Vec::with_capacity(items.len());
    let mut returns = Vec::with_capacity(items.len());
    for (item, v) in items.iter().zip(values) {
        let mut a = vec![0.0; item.mask.len()];
        let mut ret = vec![0.0; item.mask.len()];
        let steps: Vec<usize> = (0..item.mask.len())
            .filter(|&t| item.mask[t] == 1)
            .collect();
        let (mut next_value, mut next_adv) = (0.0, 0.0);
        for (n, &t) in steps.iter().enumerate().rev() {
            let r = if n + 1 == steps.len() {
                item.reward
            } else {
                0.0
            };
            let delta = r + gamma * next_value - v[t];
            next_adv = delta + gamma * lambda * next_adv;
            a[t] = next_adv;
            ret[t] = next_adv + v[t];
            next_value = v[t];
        }
        advantages.push(a);
        returns.push(ret);
    }
    (advantages, returns)
}

/// Dynamic sampling (DAPO, L0): keeps only groups whose rewards differ (a group where
/// every chain got the same reward has zero advantage everywhere and teaches nothing),
/// across rollout rounds, until enough groups are kept.
#[derive(Debug, Clone, Default)]
pub struct GroupFilter {
    target: usize,
    kept: Vec<Vec<Trajectory>>,
    dropped: usize,
    rounds: usize,
}

impl GroupFilter {
    /// Collects up to `target_groups` informative groups.
    pub fn new(target_groups: usize) -> Self {
        Self {
            target: target_groups,
            ..Self::default()
        }
    }

    /// Adds one round of trajectories (grouped by sample id); returns how many of its
    /// groups were dropped.
    pub fn add(&mut self, trajectories: Vec<Trajectory>) -> usize {
        self.rounds += 1;
        let mut by_group: Vec<(String, Vec<Trajectory>)> = Vec::new();
        for t in trajectories {
            match by_group.iter_mut().find(|(g, _)| *g == t.sample_id) {
                Some((_, members)) => members.push(t),
                None => by_group.push((t.sample_id.clone(), vec![t])),
            }
        }
        let mut dropped = 0;
        for (_, members) in by_group {
            let first = members[0].reward.unwrap_or(0.0);
            let uniform = members.iter().all(|t| t.reward.unwrap_or(0.0) == first);
            if uniform {
                dropped += 1;
            } else if self.kept.len() < self.target {
                self.kept.push(members);
            }
        }
        self.dropped += dropped;
        dropped
    }

    /// Enough groups kept?
    pub fn is_full(&self) -> bool {
        self.kept.len() >= self.target
    }

    /// Groups kept so far.
    pub fn kept_groups(&self) -> usize {
        self.kept.len()
    }

    /// Groups dropped so far.
    pub fn dropped_groups(&self) -> usize {
        self.dropped
    }

    /// Rounds added so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The kept trajectories, group by group.
    pub fn into_trajectories(self) -> Vec<Trajectory> {
        self.kept.into_iter().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item<'a>(group: &'a str, reward: f32, mask: &'a [u8]) -> Scored<'a> {
        Scored {
            group,
            reward,
            mask,
        }
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn grpo_normalises_within_each_group() {
        let m = [0, 1, 1, 0, 1];
        let items = [
            item("a", 1.0, &m),
            item("a", 0.0, &m),
            item("b", 2.0, &m),
            item("a", 0.0, &m),
            item("b", 4.0, &m),
        ];
        // Group a: mean 1/3, sample std sqrt(1/3) = 0.57735.
        // (1 - 1/3) / 0.57735 = 1.1547; (0 - 1/3) / 0.57735 = -0.57735.
        // Group b: mean 3, sample std sqrt(2) = 1.41421: ±0.70711.
        close(
            &grpo(&items, true),
            &[
                1.154_700_5,
                -0.577_350_3,
                -std::f32::consts::FRAC_1_SQRT_2,
                -0.577_350_3,
                std::f32::consts::FRAC_1_SQRT_2,
            ],
        );
        close(
            &grpo(&items, false),
            &[2.0 / 3.0, -1.0 / 3.0, -1.0, -1.0 / 3.0, 1.0],
        );
        let all = Estimator::default().compute(&items, None, None).unwrap();
        close(
            &all.advantages[0],
            &[0.0, 1.154_700_5, 1.154_700_5, 0.0, 1.154_700_5],
        );
        // Equal rewards: zero advantage, no division by zero.
        let flat = [item("c", 1.0, &m), item("c", 1.0, &m)];
        close(&grpo(&flat, true), &[0.0, 0.0]);
    }

    #[test]
    fn a_group_shrunk_to_one_member_teaches_nothing() {
        let m = [0, 1, 1];
        let items = [
            item("a", 1.0, &m),
            item("a", 0.0, &m),
            item("lone", 1.0, &m),
        ];
        for normalize_std in [true, false] {
            assert_eq!(grpo(&items, normalize_std)[2], 0.0);
        }
        assert_eq!(rloo(&items)[2], 0.0);
        let all = Estimator::default().compute(&items, None, None).unwrap();
        assert_eq!(all.advantages[2], [0.0, 0.0, 0.0]);
    }

    #[test]
    fn rloo_subtracts_the_mean_of_the_others() {
        let m = [1];
        let items = [
            item("a", 1.0, &m),
            item("a", 0.0, &m),
            item("a", 0.0, &m),
            item("z", 5.0, &m),
        ];
        // 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5; a lone item has no baseline: 0.
        close(&rloo(&items), &[1.0, -0.5, -0.5, 0.0]);
    }

    #[test]
    fn reinforce_pp_discounts_over_sampled_tokens_only_and_whitens() {
        // Tokens: prompt, s, s, obs, obs, s.  Reward 1 at the last sampled token.
        let m = [0, 1, 1, 0, 0, 1];
        let items = [item("a", 1.0, &m)];
        let kl = vec![vec![9.0, 0.1, 0.2, 9.0, 9.0, 0.3]];
        let raw = {
            // r = -0.5*kl, +1 at the end; γ = 0.5 over sampled tokens (obs skipped):
            // G5 = 1 - 0.15 = 0.85; G2 = -0.1 + 0.5*0.85 = 0.325; G1 = -0.05 + 0.5*0.325 = 0.1125
            let g = [0.1125f32, 0.325, 0.85];
            let mean = g.iter().sum::<f32>() / 3.0;
            let std = (g.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 3.0).sqrt();
            g.map(|x| (x - mean) / (std + STD_EPS))
        };
        let out = reinforce_pp(&items, &kl, 0.5, 0.5);
        close(&out[0], &[0.0, raw[0], raw[1], 0.0, 0.0, raw[2]]);
        let est = Estimator::ReinforcePlusPlus {
            gamma: 0.5,
            kl_coef: 0.5,
        };
        assert!(
            est.compute(&items, None, None).is_err(),
            "KL estimates are required"
        );
        assert_eq!(
            est.compute(&items, Some(&kl), None).unwrap().advantages,
            out
        );
    }

    #[test]
    fn gae_skips_observation_tokens() {
        let m = [0, 1, 0, 1, 1];
        let items = [item("a", 1.0, &m)];
        let values = vec![vec![7.0, 0.5, 7.0, 0.25, 0.75]];
        let (a, r) = gae(&items, &values, 0.9, 0.8);
        // Steps 1, 3, 4 (values 0.5, 0.25, 0.75); reward 1 at step 4.
        // δ4 = 1 - 0.75 = 0.25;  A4 = 0.25
        // δ3 = 0.9*0.75 - 0.25 = 0.425;  A3 = 0.425 + 0.72*0.25 = 0.605
        // δ1 = 0.9*0.25 - 0.5 = -0.275;  A1 = -0.275 + 0.72*0.605 = 0.1606
        close(&a[0], &[0.0, 0.1606, 0.0, 0.605, 0.25]);
        close(&r[0], &[0.0, 0.6606, 0.0, 0.855, 1.0]);
        // γ = λ = 1 and a zero critic: every step's advantage is the reward.
        let zeros = vec![vec![0.0; 5]];
        close(
            &gae(&items, &zeros, 1.0, 1.0).0[0],
            &[0.0, 1.0, 0.0, 1.0, 1.0],
        );
        let est = Estimator::Gae {
            gamma: 0.9,
            lambda: 0.8,
        };
        assert!(
            est.compute(&items, None, None)
                .unwrap_err()
                .0
                .contains("critic values")
        );
        let short = vec![vec![0.0; 2]];
        assert!(est.compute(&items, None, Some(&short)).is_err());
    }

    #[test]
    fn estimators_read_from_config() {
        let e: Estimator = serde_json::from_str(r#"{"name": "grpo"}"#).unwrap();
        assert_eq!(
            e,
            Estimator::Grpo {
                normalize_std: true
            }
        );
        let e: Estimator = serde_json::from_str(r#"{"name": "gae", "lambda": 0.95}"#).unwrap();
        assert_eq!(
            e,
            Estimator::Gae {
                gamma: 1.0,
                lambda: 0.95
            }
        );
        assert!(serde_json::from_str::<Estimator>(r#"{"name": "ppo2"}"#).is_err());
        assert!(serde_json::from_str::<Estimator>(r#"{"name": "rloo", "x": 1}"#).is_err());
    }

    fn traj(group: &str, chain: usize, reward: f32) -> Trajectory {
        Trajectory {
            sample_id: group.into(),
            chain,
            reward: Some(reward),
            ..Trajectory::default()
        }
    }

    #[test]
    fn dynamic_sampling_drops_uniform_groups_until_full() {
        let mut filter = GroupFilter::new(2);
        let round1 = vec![
            traj("a", 0, 1.0),
            traj("a", 1, 1.0),
            traj("b", 0, 0.0),
            traj("b", 1, 1.0),
        ];
        assert_eq!(filter.add(round1), 1);
        assert!(!filter.is_full());
        let round2 = vec![
            traj("c", 0, 0.0),
            traj("c", 1, 0.0),
            traj("d", 0, 0.5),
            traj("d", 1, 0.0),
            traj("e", 0, 1.0),
            traj("e", 1, 0.0),
        ];
        assert_eq!(filter.add(round2), 1);
        assert!(filter.is_full());
        assert_eq!(
            (
                filter.kept_groups(),
                filter.dropped_groups(),
                filter.rounds()
            ),
            (2, 2, 2)
        );
        let kept: Vec<_> = filter
            .into_trajectories()
            .iter()
            .map(|t| (t.sample_id.clone(), t.chain))
            .collect();
        assert_eq!(
            kept,
            [
                ("b".into(), 0),
                ("b".into(), 1),
                ("d".into(), 0),
                ("d".into(), 1)
            ]
        );
    }
}
