//! Rewards: what `#[reward]` registers ([`RewardSpec`]), the set a run scores with
//! ([`Rewards`]) and what a reward gives back ([`RewardOutput`]).

mod error;
mod output;
mod rewards;
mod spec;

pub use error::RewardError;
pub use output::{IntoRewardOutput, RewardOutput};
pub use rewards::Rewards;
pub use spec::{RewardFuture, RewardInput, RewardSpec};
