//! Training: the pieces of an update, each in its own file.
//!
//! | module | what lives there |
//! |---|---|
//! | `logprobs` | per-token log-probs (and entropies) of given ids, at chosen positions only |
//! | `loss` | the masked PPO-family loss (clip-higher, aggregations, KL estimators, entropy) and the SFT loss |
//! | `optim` | AdamW with PyTorch's defaults, global-norm clipping, the learning-rate schedule |
//! | `adamw` | [`FusedAdamW`]: Burn's AdamW update and state in one pass per parameter on the CPU |
//! | `rows` | the rows to learn from, micro-batches by padded-token budget, the learned positions |
//! | `score` | forward passes at the learned positions, with and without gradient |
//! | `actor` | [`Actor`]: the policy being trained and its optimizer |
//! | `reference` | [`Reference`]: the frozen reference policy, its log-probs and per-token KL |
//! | `value`, `critic` | [`ValueHead`] and [`value_loss`]; [`Critic`]: the head with its optimizer |
//! | `ppo` | [`policy_update`]: one PPO-family update of the actor (and critic) |
//! | `sft` | [`sft_update`]: one supervised update |
//! | `config`, `report` | [`TrainSection`], how updates run; [`StepReport`], what one did |

mod actor;
mod adamw;
mod config;
mod critic;
mod logprobs;
mod loss;
mod optim;
mod ppo;
mod reference;
mod report;
mod rows;
mod score;
mod sft;
mod value;

pub use actor::Actor;
pub use adamw::FusedAdamW;
pub use config::TrainSection;
pub use critic::Critic;
pub use logprobs::{
    AtPositions, Packed, logprobs_at, logprobs_from_logits, logprobs_of_hidden, token_logprobs,
};
pub use loss::{
    KlEstimator, LossAggregation, PolicyLoss, PolicyLossConfig, PolicyLossInput,
    aggregation_weights, policy_loss, sft_loss,
};
pub use optim::{OptimConfig, Schedule, clip_grad_norm, grad_norm};
pub use ppo::policy_update;
pub use reference::Reference;
pub use report::StepReport;
pub use rows::{PolicyRow, micro_batches, pack_rows, share_prefixes};
pub use sft::sft_update;
pub use value::{ValueHead, value_loss};
