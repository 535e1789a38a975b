//! What `#[reward]` registers, and what it is given.

use super::{RewardError, RewardOutput};
use crate::data::Sample;
use crate::origin::Origin;
use crate::rollout::Trajectory;
use crate::tool::CallContext;
use std::future::Future;
use std::pin::Pin;

/// The future of one scoring.
pub type RewardFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RewardOutput, RewardError>> + Send + 'a>>;

/// Everything a reward's parameters are filled from.
#[derive(Debug)]
pub struct RewardInput<'a> {
    /// The final answer text of the chain.
    pub response: &'a str,
    /// The whole trajectory.
    pub trajectory: &'a Trajectory,
    /// The dataset sample; other parameter names are read from its fields.
    pub sample: &'a Sample,
    /// The chain's context, with the environments it holds.
    pub ctx: &'a mut CallContext,
}

/// A registered reward. `#[reward]` builds one per function; find them through
/// [`Rewards`](super::Rewards).
#[derive(Debug)]
pub struct RewardSpec {
    /// The name runs select it by.
    pub name: &'static str,
    /// The doc comment of the function (may be empty).
    pub description: &'static str,
    /// The sample fields it reads, in parameter order.
    pub fields: &'static [&'static str],
    /// Fills the parameters and runs the function. [`Rewards`](super::Rewards) adds the
    /// timeout and panic catching.
    pub score: for<'a> fn(RewardInput<'a>) -> RewardFuture<'a>,
    /// Its own timeout; else the set's default.
    pub timeout_ms: Option<u64>,
    /// The environment type, as written in `env = Type`.
    pub env: Option<&'static str>,
    /// Where the function is defined.
    pub origin: Origin,
}

inventory::collect!(RewardSpec);
