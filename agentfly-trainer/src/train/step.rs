//! One policy update: micro-batches by token budget, old (and reference) log-probs in one
//! no-grad pass per micro-batch, the masked loss with exact gradient accumulation, global-
//! norm clipping, and AdamW — skipped, with the reason, when anything is not finite.

use super::logprobs::{AtPositions, Packed, logprobs_at};
use super::loss::{PolicyLossConfig, PolicyLossInput, aggregation_weights, policy_loss};
use super::optim::{OptimConfig, clip_grad_norm};
use super::value::{ValueHead, value_loss};
use crate::model::{Decoder, Rope};
use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// One sequence to learn from.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRow {
    /// Every token (prompt, sampled ids, observations).
    pub tokens: Vec<u32>,
    /// Per token: 1 where the loss applies (the sampled ids), else 0.
    pub mask: Vec<f32>,
    /// Per token: its advantage.
    pub advantages: Vec<f32>,
    /// Per token: the critic's target (GAE's returns); empty without a critic.
    pub returns: Vec<f32>,
    /// Per token: the critic's values when the batch was rolled out; empty without one.
    pub old_values: Vec<f32>,
}

/// How one update runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StepConfig {
    /// The loss (`[train.loss]` in a config file).
    pub loss: PolicyLossConfig,
    /// Optimizer updates per batch (PPO epochs); the old log-probs stay those from before
    /// the first.
    pub ppo_epochs: usize,
    /// A micro-batch holds at most this many padded positions (at least one sequence).
    pub micro_batch_tokens: usize,
    /// Weight of the critic's value loss (PPO with GAE).
    pub value_coef: f32,
    /// How far a value may move from its rollout-time value before the loss clips it.
    pub value_clip: f32,
    /// Measure the KL to the reference (in [`StepReport::kl`]) even when it is not in the
    /// loss: one more forward pass of the reference per update.
    pub track_kl: bool,
}

impl Default for StepConfig {
    fn default() -> Self {
        Self {
            loss: PolicyLossConfig::default(),
            ppo_epochs: 1,
            micro_batch_tokens: 4096,
            value_coef: 0.5,
            value_clip: 0.2,
            track_kl: false,
        }
    }
}

/// What an update did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepReport {
    /// The loss (last epoch).
    pub loss: f32,
    /// The clipped surrogate part.
    pub pg_loss: f32,
    /// The KL to the reference (0 without one).
    pub kl: f32,
    /// The entropy of the policy on the learned tokens.
    pub entropy: f32,
    /// Share of learned tokens whose ratio was clipped.
    pub clip_fraction: f32,
    /// Mean `ratio − 1` (0 on the first epoch, up to numerics).
    pub ratio_deviation: f32,
    /// Global gradient norm before clipping (last epoch).
    pub grad_norm: f32,
    /// The critic's clipped value loss (0 without a critic).
    pub value_loss: f32,
    /// The learning rate used.
    pub lr: f64,
    /// Tokens the loss applied to.
    pub tokens: usize,
    /// Micro-batches per epoch.
    pub micro_batches: usize,
    /// Updates applied (epochs not skipped).
    pub updates: usize,
    /// Why an epoch's update was skipped, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The policy being trained, its optimizer and the frozen reference.
pub struct PolicyTrainer {
    decoder: Option<Decoder>,
    rope: Rope,
    reference: Option<Decoder>,
    optim: ModuleOptimizer,
    critic: Option<(ValueHead, ModuleOptimizer)>,
    /// The optimizer's settings and schedule.
    pub optim_config: OptimConfig,
    /// Updates applied so far (the schedule's step).
    pub step: usize,
    /// The schedule's length.
    pub total_steps: usize,
}

impl std::fmt::Debug for PolicyTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyTrainer")
            .field("step", &self.step)
            .field("total_steps", &self.total_steps)
            .field("reference", &self.reference.is_some())
            .finish()
    }
}

/// Groups of row indices whose padded size `rows × longest` stays within `budget`.
pub fn micro_batches(lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let len = lens[i].max(longest);
        if !current.is_empty() && (current.len() + 1) * len > budget {
            out.push(std::mem::take(&mut current));
            longest = 0;
        }
        longest = longest.max(lens[i]);
        current.push(i);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn tensor2(values: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// The positions a micro-batch learns from: `(row in the group, position)` pairs of the
/// packed batch, the ids they predict, and `(row, position)` to read per-row values. A row
/// without a mask (scoring only) has every position.
fn picks(rows: &[PolicyRow], group: &[usize]) -> Picks {
    let mut picks = Vec::new();
    let mut targets = Vec::new();
    let mut at = Vec::new();
    for (k, &i) in group.iter().enumerate() {
        let row = &rows[i];
        for t in 0..row.tokens.len() - 1 {
            if row.mask.is_empty() || row.mask[t + 1] > 0.0 {
                picks.push((k, t));
                targets.push(row.tokens[t + 1]);
                at.push((i, t));
            }
        }
    }
    Picks { picks, targets, at }
}

/// See [`picks`].
struct Picks {
    picks: Vec<(usize, usize)>,
    targets: Vec<u32>,
    at: Vec<(usize, usize)>,
}

impl PolicyTrainer {
    /// Trains `decoder` (on an autodiff device); `reference` (any device) is needed for a
    /// KL penalty.
    pub fn new(
        decoder: Decoder,
        rope: Rope,
        reference: Option<Decoder>,
        optim_config: OptimConfig,
        total_steps: usize,
    ) -> Self {
        Self {
            decoder: Some(decoder),
            rope,
            reference,
            optim: optim_config.init(),
            critic: None,
            optim_config,
            step: 0,
            total_steps,
        }
    }

    /// Adds a critic (PPO with GAE): `head`, trained by an AdamW of its own with the
    /// policy's settings; `optim` resumes its state.
    pub fn set_critic(&mut self, head: ValueHead, optim: Option<ModuleOptimizer>) {
        let optim = optim.unwrap_or_else(|| self.optim_config.init());
        self.critic = Some((head, optim));
    }

    /// Replaces the frozen reference (e.g. with the policy after a supervised warm start).
    pub fn set_reference(&mut self, reference: Option<Decoder>) {
        self.reference = reference;
    }

    /// The frozen reference model, when there is one.
    pub fn reference(&self) -> Option<&Decoder> {
        self.reference.as_ref()
    }

    /// The critic and its optimizer, when there is one.
    pub fn critic(&self) -> Option<&(ValueHead, ModuleOptimizer)> {
        self.critic.as_ref()
    }

    /// The policy being trained.
    pub fn decoder(&self) -> &Decoder {
        self.decoder
            .as_ref()
            .expect("the decoder is only out during an update")
    }

    /// A copy of the policy without autodiff, for generation.
    pub fn snapshot(&self) -> Decoder {
        self.decoder().valid()
    }

    /// Log-probs of every row's tokens `1..` under `decoder`, without gradient, at the
    /// learned positions (0 elsewhere).
    fn score(&self, decoder: &Decoder, rows: &[PolicyRow], groups: &[Vec<usize>]) -> Vec<Vec<f32>> {
        self.score_with(decoder, rows, groups, None).0
    }

    /// [`score`](Self::score), and the values of `head` at the same positions (aligned to
    /// the predicted token: `values[i][t + 1]`).
    fn score_with(
        &self,
        decoder: &Decoder,
        rows: &[PolicyRow],
        groups: &[Vec<usize>],
        head: Option<&ValueHead>,
    ) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let mut out: Vec<Vec<f32>> = rows.iter().map(|r| vec![0.0; r.tokens.len() - 1]).collect();
        let mut values: Vec<Vec<f32>> = rows.iter().map(|r| vec![0.0; r.tokens.len()]).collect();
        for group in groups {
            let Some((Picks { at, .. }, got)) = self.pass(decoder, rows, group, false) else {
                continue;
            };
            let host: Vec<f32> = got.logprobs.into_data().try_into_vec::<f32>().expect("f32");
            for (&(i, t), v) in at.iter().zip(host) {
                out[i][t] = v;
            }
            if let Some(head) = head {
                let head = head.valid();
                let v = head.forward(got.hidden.inner());
                let host: Vec<f32> = v.into_data().try_into_vec::<f32>().expect("f32");
                for (&(i, t), v) in at.iter().zip(host) {
                    values[i][t + 1] = v;
                }
            }
        }
        (out, values)
    }

    /// The learned positions of one micro-batch and what the policy computes there, or
    /// `None` when the group has nothing to learn.
    fn pass(
        &self,
        decoder: &Decoder,
        rows: &[PolicyRow],
        group: &[usize],
        with_entropy: bool,
    ) -> Option<(Picks, AtPositions)> {
        let found = picks(rows, group);
        if found.picks.is_empty() {
            return None;
        }
        let device = decoder.embed.val().device();
        let seqs: Vec<&[u32]> = group.iter().map(|&i| rows[i].tokens.as_slice()).collect();
        let packed = Packed::new(&seqs, &device);
        let got = logprobs_at(
            decoder,
            &self.rope,
            packed.ids,
            &found.picks,
            &found.targets,
            with_entropy,
        );
        Some((found, got))
    }

    /// The critic's values of each row's learned tokens (aligned to tokens, 0 elsewhere),
    /// for GAE; `None` without a critic.
    pub fn values(&self, rows: &[PolicyRow], budget: usize) -> Option<Vec<Vec<f32>>> {
        let (head, _) = self.critic.as_ref()?;
        let lens: Vec<usize> = rows.iter().map(|r| r.tokens.len()).collect();
        let groups = micro_batches(&lens, budget.max(1));
        Some(
            self.score_with(&self.snapshot(), rows, &groups, Some(head))
                .1,
        )
    }

    /// Per token of each row, `log π(t) − log π_ref(t)` (k1) under the current policy and
    /// the reference (0 on the first token); `None` without a reference. For estimators
    /// that put the KL penalty in the reward (REINFORCE++).
    pub fn kl_to_reference(&self, tokens: &[&[u32]], budget: usize) -> Option<Vec<Vec<f32>>> {
        let reference = self.reference.as_ref()?;
        let rows: Vec<PolicyRow> = tokens
            .iter()
            .map(|t| PolicyRow {
                tokens: t.to_vec(),
                mask: Vec::new(),
                advantages: Vec::new(),
                returns: Vec::new(),
                old_values: Vec::new(),
            })
            .collect();
        let lens: Vec<usize> = tokens.iter().map(|t| t.len()).collect();
        let groups = micro_batches(&lens, budget.max(1));
        let policy = self.score(&self.snapshot(), &rows, &groups);
        let reference = self.score(reference, &rows, &groups);
        Some(
            tokens
                .iter()
                .zip(policy.iter().zip(&reference))
                .map(|(t, (p, r))| {
                    let mut kl = vec![0.0];
                    kl.extend(p.iter().zip(r).take(t.len() - 1).map(|(p, r)| p - r));
                    kl
                })
                .collect(),
        )
    }

    /// The optimizer, for checkpoints.
    pub fn optimizer(&self) -> &ModuleOptimizer {
        &self.optim
    }

    /// Replaces the optimizer's state (resuming from a checkpoint).
    pub fn set_optimizer(&mut self, optim: ModuleOptimizer) {
        self.optim = optim;
    }

    /// One supervised update (SFT): masked cross-entropy, token-mean over the rows' masked
    /// tokens, with `optim` (SFT keeps its own optimizer and learning rate) at `lr`.
    /// Returns the loss and the gradient norm; a non-finite one skips the update.
    pub fn sft_update(
        &mut self,
        rows: &[PolicyRow],
        micro_batch_tokens: usize,
        optim: &mut ModuleOptimizer,
        lr: f64,
    ) -> StepReport {
        let lens: Vec<usize> = rows.iter().map(|r| r.tokens.len()).collect();
        let groups = micro_batches(&lens, micro_batch_tokens.max(1));
        let masks: Vec<Vec<f32>> = rows.iter().map(|r| r.mask[1..].to_vec()).collect();
        let weights = aggregation_weights(&masks, super::loss::LossAggregation::TokenMean);
        let decoder = self.decoder.take().expect("the decoder is in place");
        let device = decoder.embed.val().device();
        let mut accumulator = GradientsAccumulator::new();
        let mut report = StepReport {
            lr,
            tokens: masks.iter().flatten().filter(|&&m| m > 0.0).count(),
            micro_batches: groups.len(),
            ..StepReport::default()
        };
        for group in &groups {
            let Some((Picks { at, .. }, got)) = self.pass(&decoder, rows, group, false) else {
                continue;
            };
            let (n, logprobs) = (at.len(), got.logprobs);
            let w: Vec<f32> = at.iter().map(|&(i, t)| weights[i][t]).collect();
            let loss =
                super::loss::sft_loss(logprobs.unsqueeze_dim::<2>(0), tensor2(w, [1, n], &device));
            report.loss += loss.clone().into_scalar::<f32>();
            accumulator.accumulate(
                &decoder,
                GradientsParams::from_grads(loss.backward(), &decoder),
            );
        }
        let mut grads = accumulator.grads();
        report.grad_norm = clip_grad_norm(&decoder, &mut grads, self.optim_config.max_grad_norm);
        if report.loss.is_finite() && report.grad_norm.is_finite() {
            self.decoder = Some(optim.step(lr, decoder, grads));
            report.updates = 1;
        } else {
            report.skipped = Some(format!(
                "non-finite SFT loss {} or gradient norm {}: update skipped, weights unchanged",
                report.loss, report.grad_norm
            ));
            self.decoder = Some(decoder);
        }
        report
    }

    /// One batch: `ppo_epochs` optimizer updates on `rows` (each at least 2 tokens).
    pub fn update(&mut self, rows: &[PolicyRow], config: &StepConfig) -> StepReport {
        let lens: Vec<usize> = rows.iter().map(|r| r.tokens.len()).collect();
        let groups = micro_batches(&lens, config.micro_batch_tokens.max(1));
        let plain = self.snapshot();
        let old = self.score(&plain, rows, &groups);
        drop(plain);
        let reference = if config.loss.kl_coef != 0.0 || config.track_kl {
            self.reference
                .as_ref()
                .map(|r| self.score(r, rows, &groups))
        } else {
            None
        };
        let masks: Vec<Vec<f32>> = rows.iter().map(|r| r.mask[1..].to_vec()).collect();
        let weights = aggregation_weights(&masks, config.loss.aggregation);
        let lr = self.optim_config.lr_at(self.step, self.total_steps);
        let mut report = StepReport {
            lr,
            tokens: masks.iter().flatten().filter(|&&m| m > 0.0).count(),
            micro_batches: groups.len(),
            ..StepReport::default()
        };
        if config.loss.kl_coef != 0.0 && reference.is_none() {
            report.skipped = Some("a KL penalty needs a reference model".into());
            return report;
        }
        let has_returns = rows
            .iter()
            .all(|r| r.returns.len() == r.tokens.len() && r.old_values.len() == r.tokens.len());
        for _ in 0..config.ppo_epochs.max(1) {
            let decoder = self.decoder.take().expect("the decoder is in place");
            let device = decoder.embed.val().device();
            let mut accumulator = GradientsAccumulator::new();
            let mut critic_grads = GradientsAccumulator::new();
            let mut parts = [0.0f32; 5];
            let mut loss_total = 0.0f32;
            let mut value_total = 0.0f32;
            for group in &groups {
                // The entropy is reported even when it is not in the loss.
                let Some((Picks { at, .. }, got)) = self.pass(&decoder, rows, group, true) else {
                    continue;
                };
                let n = at.len();
                let gather = |f: &dyn Fn(usize, usize) -> f32| {
                    let values: Vec<f32> = at.iter().map(|&(i, t)| f(i, t)).collect();
                    tensor2(values, [1, n], &device)
                };
                let (logprobs, entropy) = (got.logprobs, got.entropy);
                let critic_loss = match (&self.critic, has_returns) {
                    (Some((head, _)), true) => {
                        let flat = |f: &dyn Fn(usize, usize) -> f32| {
                            let values: Vec<f32> = at.iter().map(|&(i, t)| f(i, t)).collect();
                            Tensor::<1>::from_data(TensorData::new(values, [n]), &device)
                        };
                        Some(value_loss(
                            head.forward(got.hidden),
                            flat(&|i, t| rows[i].old_values[t + 1]),
                            flat(&|i, t| rows[i].returns[t + 1]),
                            flat(&|i, t| weights[i][t]),
                            config.value_clip,
                        ))
                    }
                    _ => None,
                };
                let out = policy_loss(
                    PolicyLossInput {
                        logprobs: logprobs.unsqueeze_dim::<2>(0),
                        old_logprobs: gather(&|i, t| old[i][t]),
                        ref_logprobs: reference.as_ref().map(|r| gather(&|i, t| r[i][t])),
                        advantages: gather(&|i, t| rows[i].advantages[t + 1]),
                        weights: gather(&|i, t| weights[i][t]),
                        entropy: entropy.map(|e| e.unsqueeze_dim::<2>(0)),
                    },
                    &config.loss,
                );
                let p: Vec<f32> = out.parts.into_data().try_into_vec::<f32>().expect("f32");
                for (total, x) in parts.iter_mut().zip(p) {
                    *total += x;
                }
                loss_total += out.loss.clone().into_scalar::<f32>();
                let total = match critic_loss {
                    Some(v) => {
                        value_total += v.clone().into_scalar::<f32>();
                        out.loss + v * config.value_coef
                    }
                    None => out.loss,
                };
                let mut grads = total.backward();
                if let Some((head, _)) = &self.critic {
                    critic_grads.accumulate(head, GradientsParams::from_module(&mut grads, head));
                }
                accumulator.accumulate(&decoder, GradientsParams::from_grads(grads, &decoder));
            }
            let mut grads = accumulator.grads();
            let norm = clip_grad_norm(&decoder, &mut grads, self.optim_config.max_grad_norm);
            report.loss = loss_total;
            report.pg_loss = parts[0];
            report.kl = parts[1];
            report.entropy = parts[2];
            report.clip_fraction = parts[3];
            report.ratio_deviation = parts[4];
            report.grad_norm = norm;
            report.value_loss = value_total;
            if !loss_total.is_finite() || !norm.is_finite() || !value_total.is_finite() {
                report.skipped = Some(format!(
                    "non-finite {} (loss {loss_total}, gradient norm {norm}): update skipped, weights unchanged",
                    if loss_total.is_finite() {
                        "gradient"
                    } else {
                        "loss"
                    }
                ));
                self.decoder = Some(decoder);
                continue;
            }
            self.decoder = Some(self.optim.step(lr, decoder, grads));
            if let Some((head, mut optim)) = self.critic.take() {
                let mut grads = critic_grads.grads();
                clip_grad_norm(&head, &mut grads, self.optim_config.max_grad_norm);
                self.critic = Some((optim.step(lr, head, grads), optim));
            }
            report.updates += 1;
        }
        if report.updates > 0 {
            self.step += 1;
        }
        report
    }
}
