//! The actor: the policy being trained (on an autodiff device), its rotary tables, its
//! AdamW and the learning-rate schedule's position.

use super::optim::OptimConfig;
use super::rows::{PolicyRow, micro_batches_of};
use super::score::score;
use agentfly_model::model::{Decoder, Rope};
use burn::optim::{GradientsParams, ModuleOptimizer};

/// The policy being trained and its optimizer.
pub struct Actor {
    decoder: Option<Decoder>,
    rope: Rope,
    optim: ModuleOptimizer,
    /// The optimizer's settings and schedule.
    pub optim_config: OptimConfig,
    /// Updates applied so far (the schedule's step).
    pub step: usize,
    /// The schedule's length.
    pub total_steps: usize,
    /// The temperature the rollouts sample at: the policy's log-probs are taken from
    /// `softmax(logits / temperature)`, the distribution the tokens were drawn from.
    pub temperature: f32,
    /// Changes whenever the weights do (each applied update): two saves of the same
    /// version hold the same weights.
    version: u64,
}

impl std::fmt::Debug for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actor")
            .field("step", &self.step)
            .field("total_steps", &self.total_steps)
            .finish()
    }
}

impl Actor {
    /// Trains `decoder` (on an autodiff device) with a fresh AdamW of `optim_config` over a
    /// schedule of `total_steps`.
    pub fn new(
        decoder: Decoder,
        rope: Rope,
        optim_config: OptimConfig,
        total_steps: usize,
    ) -> Self {
        Self {
            decoder: Some(decoder),
            rope,
            optim: optim_config.init(),
            optim_config,
            step: 0,
            total_steps,
            temperature: 1.0,
            version: 0,
        }
    }

    /// Which weights the policy holds: changes with every applied update, so two saves that
    /// see the same version write the same weights.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The policy being trained.
    pub fn decoder(&self) -> &Decoder {
        self.decoder
            .as_ref()
            .expect("the decoder is only out during an update")
    }

    /// A copy of the policy without autodiff (its adapters, if any, merged into the
    /// weights), for generation and scoring.
    pub fn snapshot(&self) -> Decoder {
        self.decoder().merged()
    }

    /// The rotary tables.
    pub fn rope(&self) -> &Rope {
        &self.rope
    }

    /// The optimizer, for checkpoints.
    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// Replaces the optimizer's state (resuming from a checkpoint).
    pub fn set_optimizer(&mut self, optim: ModuleOptimizer) {
        self.optim = optim;
    }

    /// The learning rate of the next update.
    pub fn lr(&self) -> f64 {
        self.optim_config.lr_at(self.step, self.total_steps)
    }

    /// The policy's log-probs of every row's learned tokens at its temperature, without
    /// gradient (0 elsewhere).
    pub fn logprobs(&self, rows: &[PolicyRow], budget: usize) -> Vec<Vec<f32>> {
        let groups = micro_batches_of(rows, budget);
        score(
            &self.snapshot(),
            &self.rope,
            rows,
            &groups,
            None,
            self.temperature,
        )
        .0
    }

    /// Takes the decoder out for an update; [`Actor::put`] or [`Actor::apply`] returns it.
    pub(crate) fn take(&mut self) -> Decoder {
        self.decoder.take().expect("the decoder is in place")
    }

    /// Puts the decoder back unchanged (a skipped update).
    pub(crate) fn put(&mut self, decoder: Decoder) {
        self.decoder = Some(decoder);
    }

    /// Puts the decoder back after one step of `optim` (the actor's own, or SFT's) with
    /// `grads` at `lr`.
    pub(crate) fn apply(
        &mut self,
        decoder: Decoder,
        grads: GradientsParams,
        lr: f64,
        optim: Option<&mut ModuleOptimizer>,
    ) {
        let optim = optim.unwrap_or(&mut self.optim);
        self.decoder = Some(optim.step(lr, decoder, grads));
        self.version += 1;
    }
}
