//! The estimators by name, as a run's configuration chooses them, and what they give.

use super::gae::gae;
use super::grpo::grpo;
use super::reinforce_pp::reinforce_pp;
use super::rloo::rloo;
use super::scored::{Scored, broadcast};
use serde::{Deserialize, Serialize};

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
