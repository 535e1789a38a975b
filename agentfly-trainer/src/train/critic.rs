//! The critic of PPO with GAE: a [`ValueHead`] on the actor's stopped-gradient hidden
//! states, with an AdamW of its own (the actor's settings).

use super::actor::Actor;
use super::optim::{OptimConfig, clip_grad_norm};
use super::rows::{PolicyRow, micro_batches_of};
use super::score::score;
use super::value::ValueHead;
use burn::optim::{GradientsParams, ModuleOptimizer};

/// The value head and its optimizer.
pub struct Critic {
    /// The value head.
    pub head: ValueHead,
    optim: ModuleOptimizer,
}

impl std::fmt::Debug for Critic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Critic").finish_non_exhaustive()
    }
}

impl Critic {
    /// A critic of `head` with a fresh AdamW of `config`, or the saved `optim` (resuming).
    pub fn new(head: ValueHead, config: &OptimConfig, optim: Option<ModuleOptimizer>) -> Self {
        Self {
            head,
            optim: optim.unwrap_or_else(|| config.init()),
        }
    }

    /// The optimizer, for checkpoints.
    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// The values of each row's learned tokens (aligned to tokens, 0 elsewhere), for GAE.
    pub fn values(&self, actor: &Actor, rows: &[PolicyRow], budget: usize) -> Vec<Vec<f32>> {
        let groups = micro_batches_of(rows, budget);
        score(
            &actor.snapshot(),
            actor.rope(),
            rows,
            &groups,
            Some(&self.head),
            1.0,
        )
        .1
    }

    /// The critic after one AdamW step of the head at `lr`, its gradients clipped to
    /// `max_norm`.
    pub(crate) fn step(self, mut grads: GradientsParams, lr: f64, max_norm: f32) -> Self {
        let Self { head, mut optim } = self;
        clip_grad_norm(&head, &mut grads, max_norm);
        Self {
            head: optim.step(lr, head, grads),
            optim,
        }
    }
}
