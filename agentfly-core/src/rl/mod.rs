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
//!
//! | module | what |
//! |---|---|
//! | [`estimator`] | the estimators by name ([`Estimator`]) and what they give ([`Advantages`]) |
//! | [`scored`] | what they need of a trajectory ([`Scored`]), its group, advantages on sampled tokens |
//! | [`grpo`](mod@grpo), [`rloo`](mod@rloo), [`reinforce_pp`](mod@reinforce_pp), [`gae`](mod@gae) | one estimator each |
//! | [`filter`] | dynamic sampling: [`GroupFilter`] |

pub mod estimator;
pub mod filter;
pub mod gae;
pub mod grpo;
pub mod reinforce_pp;
pub mod rloo;
pub mod scored;

pub use estimator::{Advantages, Estimator, RlError};
pub use filter::GroupFilter;
pub use gae::gae;
pub use grpo::grpo;
pub use reinforce_pp::reinforce_pp;
pub use rloo::rloo;
pub use scored::{STD_EPS, Scored, broadcast, groups};

#[cfg(test)]
mod tests;
