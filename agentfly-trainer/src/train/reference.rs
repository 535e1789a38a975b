//! The frozen reference policy (the starting model, or the model after SFT): its log-probs
//! for the KL term of the loss, and per-token KL estimates for estimators that put the KL
//! in the reward (REINFORCE++).

use super::actor::Actor;
use super::rows::{PolicyRow, micro_batches_of};
use super::score::score;
use agentfly_model::model::{Decoder, Rope};

/// The frozen reference model (any device; never trained).
#[derive(Debug)]
pub struct Reference {
    /// Its weights.
    pub decoder: Decoder,
}

impl Reference {
    /// The reference's log-probs of every row's learned tokens over `groups` at
    /// `temperature` (0 elsewhere).
    pub fn logprobs(
        &self,
        rope: &Rope,
        rows: &[PolicyRow],
        groups: &[Vec<usize>],
        temperature: f32,
    ) -> Vec<Vec<f32>> {
        score(&self.decoder, rope, rows, groups, None, temperature).0
    }

    /// Per token of each sequence, `log π(t) − log π_ref(t)` (k1) under the actor's current
    /// policy and the reference (0 on the first token).
    pub fn kl(&self, actor: &Actor, tokens: &[&[u32]], budget: usize) -> Vec<Vec<f32>> {
        let rows: Vec<PolicyRow> = tokens.iter().map(|t| PolicyRow::scoring(t)).collect();
        let groups = micro_batches_of(&rows, budget);
        let policy = actor.logprobs(&rows, budget);
        let reference = self.logprobs(actor.rope(), &rows, &groups, actor.temperature);
        tokens
            .iter()
            .zip(policy.iter().zip(&reference))
            .map(|(t, (p, r))| {
                let mut kl = vec![0.0];
                kl.extend(p.iter().zip(r).take(t.len() - 1).map(|(p, r)| p - r));
                kl
            })
            .collect()
    }
}
