//! One RL step: roll out (with dynamic sampling: groups whose rewards are all equal are
//! dropped and more samples rolled out), trajectories → rows, the policy update, the new
//! weights to the engine.
//!
//! With `rollout.overlap`, the next step's batch is rolled out while this step's update
//! runs (verl's and AReaL's one-step-off-policy mode): the engine samples with the weights
//! of the step before while the actor learns, and the new weights reach the engine when
//! both are done. Each batch is therefore at most one update stale; the update corrects for
//! it with the behaviour policy's recorded log-probs (`train.behaviour_weight_cap`), and
//! every step reports its staleness. A batch rolled out but not yet learned from is kept in
//! the checkpoint, so a resumed run learns from exactly what the interrupted one would have.

use super::batch::{Batch, staleness, within_staleness};
use super::config::TrainerConfig;
use super::error::TrainError;
use super::eval::accuracy_of;
use super::metrics::{StepDetail, StepMetrics};
use super::rows::{RowInputs, advantage_means, learned_advantages, training_rows};
use super::sampler::Sampler;
use super::trainer::{Chains, Trainer};
use crate::train::{Actor, Critic, Reference, policy_update};
use agentfly_core::rl::GroupFilter;
use agentfly_core::rollout::{RolloutSummary, Trajectory};
use std::time::Instant;

/// What an update changes: the policy, its critic; what it reads: the reference and the
/// configuration. Borrowed apart from [`Chains`], so a rollout runs beside it.
struct Learner<'a> {
    config: &'a TrainerConfig,
    actor: &'a mut Actor,
    critic: &'a mut Option<Critic>,
    reference: Option<&'a Reference>,
}

impl Trainer {
    /// One step: roll out (or take the batch rolled out during the last step), compute
    /// advantages, update the policy, hand the new weights to the engine. With
    /// `rollout.overlap`, the next step's batch is rolled out during the update.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        let start = Instant::now();
        let batch = match self.pending.take() {
            Some(batch) => batch,
            None => self
                .chains
                .rollout_batch(&self.config, &mut self.sampler, self.step)?,
        };
        let overlap = self.config.rollout.overlap && self.step + 1 < self.config.train.steps;
        let Self {
            config,
            chains,
            actor,
            critic,
            reference,
            sampler,
            step,
            ..
        } = self;
        let (config, chains, step) = (&*config, &*chains, *step);
        let learner = Learner {
            config,
            actor,
            critic,
            reference: reference.as_ref(),
        };
        let mut released = false;
        let (learned, next) = if overlap {
            std::thread::scope(|s| {
                let update = s.spawn(|| learner.learn(&batch, step));
                let next = chains.rollout_batch(config, sampler, step);
                let learned = update
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (learned, Some(next))
            })
        } else {
            // The update replaces the engine's weights: they need not stay beside it.
            released = chains.generator.release()?;
            (learner.learn(&batch, step), None)
        };
        if released && learned.is_err() {
            // Serve the actor's weights again (the update failed before changing them, or
            // they are what the trainer now holds): the error may not end the run. The
            // update's error is the one to report; should this push fail too, the engine
            // answers every request with its "released" error.
            let _ = self.sync_policy(self.step as u64);
        }
        let mut metrics = learned?;
        self.pending = next.transpose()?;
        let sync_start = Instant::now();
        // The weights after this step are the policy of version `step + 1`; unchanged
        // weights (a skipped update) keep their place but take the new number.
        let version = self.step as u64 + 1;
        if metrics.update.updates > 0 || released {
            self.sync_policy(version)?;
        } else {
            self.chains.generator.relabel(version);
        }
        metrics.sync_seconds = sync_start.elapsed().as_secs_f64();
        metrics.step_seconds = start.elapsed().as_secs_f64();
        self.step += 1;
        Ok(metrics)
    }
}

impl Learner<'_> {
    /// Learns from `batch` at step `step` (0-based): rows, advantages, the update.
    fn learn(self, batch: &Batch, step: usize) -> Result<StepMetrics, TrainError> {
        let Batch { all, trained, .. } = batch;
        let failed: Vec<&Trajectory> = all.iter().filter(|t| t.reward.is_none()).collect();
        let max = self.config.train.max_reward_failures;
        if !failed.is_empty() && failed.len() as f64 > max * all.len() as f64 {
            let t = failed[0];
            return Err(TrainError::Rewards {
                step: step + 1,
                failed: failed.len(),
                total: all.len(),
                max,
                first: format!(
                    "sample `{}` chain {}: {}",
                    t.sample_id,
                    t.chain,
                    t.reward_error
                        .as_deref()
                        .or(t.error.as_deref())
                        .unwrap_or("no reward")
                ),
            });
        }
        let summary = RolloutSummary::of(all, batch.seconds);
        // Every turn records the weights that sampled it: a batch is 0 updates stale, or 1
        // when rolled out during the previous update (`rollout.overlap`). Anything older
        // (weights that did not reach the servers) is not learned from.
        let bound = usize::from(self.config.rollout.overlap);
        let staleness = all
            .iter()
            .map(|t| staleness(t, step, batch.policy_step))
            .max()
            .unwrap_or(0)
            .min(bound);
        let (trained, stale_dropped) = within_staleness(trained, step, batch.policy_step, bound);
        let mut metrics = StepMetrics {
            step: step + 1,
            trajectories: all.len(),
            reward_mean: summary.reward_mean.unwrap_or(0.0),
            accuracy: accuracy_of(all),
            trained_trajectories: trained.len(),
            dropped_groups: batch.dropped,
            reward_failures: failed.len(),
            rounds: batch.rounds,
            tool_calls: summary.calls(),
            parse_errors: summary.parse_errors,
            mean_turns: summary.mean_turns,
            sampled_tokens: summary.sampled_tokens,
            rollout_seconds: batch.seconds,
            staleness,
            stale_dropped,
            detail: StepDetail::of(all),
            ..StepMetrics::default()
        };
        let update_start = Instant::now();
        let rows = training_rows(
            &trained,
            &RowInputs {
                algorithm: &self.config.algorithm,
                actor: self.actor,
                reference: self.reference,
                critic: self.critic.as_ref(),
                budget: self.config.train.micro_batch_tokens,
            },
        );
        match rows {
            Err(e) => {
                metrics.update.skipped = Some(format!("advantages could not be computed: {e}"));
            }
            Ok(rows) if rows.is_empty() => {
                metrics.update.skipped =
                    Some("no group had differing rewards: nothing to learn from".into());
            }
            Ok(rows) => {
                let advantages = learned_advantages(&rows);
                if let Some((mean, abs_mean)) = advantage_means(&advantages) {
                    metrics.advantage_mean = mean;
                    metrics.advantage_abs_mean = abs_mean;
                }
                metrics.detail.advantages = advantages;
                metrics.update = policy_update(
                    self.actor,
                    self.critic,
                    self.reference,
                    &rows,
                    &self.config.train,
                    staleness,
                );
            }
        }
        metrics.update_seconds = update_start.elapsed().as_secs_f64();
        Ok(metrics)
    }
}

impl Chains {
    /// A step's batch, rolled out with the engine's current weights (those of step
    /// `policy_step`): every trajectory, those kept for training, the groups dropped and
    /// the rounds rolled out.
    fn rollout_batch(
        &self,
        config: &TrainerConfig,
        sampler: &mut Sampler,
        policy_step: usize,
    ) -> Result<Batch, TrainError> {
        let start = Instant::now();
        let rollout = &config.rollout;
        let target = rollout.samples_per_step;
        let dynamic = rollout.dynamic_sampling;
        let mut filter = GroupFilter::new(target);
        let mut all = Vec::new();
        let mut scored = Vec::new();
        let mut rounds = 0;
        let max_rounds = if dynamic {
            rollout.max_rounds.max(1)
        } else {
            1
        };
        for _ in 0..max_rounds {
            rounds += 1;
            let need = if dynamic {
                target - filter.kept_groups()
            } else {
                target
            };
            let seed = config.train.seed ^ sampler.cursor.wrapping_mul(0xA24B_AED4_963E_E407);
            let samples = sampler.draw(need);
            let (trajectories, _) = self.rollout(
                config,
                &samples,
                rollout.chains,
                &config.chain,
                seed,
                |_| {},
            )?;
            all.extend(trajectories.iter().cloned());
            // A trajectory without a reward is counted, never trained on as if it scored 0.
            let round: Vec<Trajectory> = trajectories
                .into_iter()
                .filter(|t| t.reward.is_some())
                .collect();
            if !dynamic {
                scored = round;
                continue;
            }
            filter.add(round);
            if filter.is_full() {
                break;
            }
        }
        let (trained, dropped) = if dynamic {
            let dropped = filter.dropped_groups();
            (filter.into_trajectories(), dropped)
        } else {
            (scored, 0)
        };
        Ok(Batch {
            all,
            trained,
            dropped,
            rounds,
            seconds: start.elapsed().as_secs_f64(),
            policy_step,
        })
    }
}
