//! Training: log-probabilities of given ids, the masked policy and SFT losses, AdamW with
//! global-norm clipping and schedules.

mod logprobs;
mod loss;
mod optim;
mod step;
mod value;

pub use logprobs::{AtPositions, Packed, logprobs_at, logprobs_from_logits, token_logprobs};
pub use loss::{
    KlEstimator, LossAggregation, PolicyLoss, PolicyLossConfig, PolicyLossInput,
    aggregation_weights, policy_loss, sft_loss,
};
pub use optim::{OptimConfig, Schedule, clip_grad_norm, grad_norm};
pub use step::{PolicyRow, PolicyTrainer, StepConfig, StepReport, micro_batches};
pub use value::{ValueHead, value_loss};
