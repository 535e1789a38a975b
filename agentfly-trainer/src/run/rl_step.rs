//! One RL step: roll out (with dynamic sampling: groups whose rewards are all equal are
//! dropped and more samples rolled out), trajectories → rows, the policy update, the new
//! weights to the engine.

use super::error::TrainError;
use super::eval::accuracy_of;
use super::metrics::StepMetrics;
use super::rows::{RowInputs, advantage_means, training_rows};
use super::trainer::Trainer;
use crate::train::policy_update;
use agentfly_core::rl::GroupFilter;
use agentfly_core::rollout::{RolloutSummary, Trajectory};
use std::time::Instant;

impl Trainer {
    /// One step: roll out, compute advantages, update the policy, hand the new weights to
    /// the engine.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        let start = Instant::now();
        let (all, trained, dropped, rounds) = self.rollout_step()?;
        let rollout_seconds = start.elapsed().as_secs_f64();
        let failed: Vec<&Trajectory> = all.iter().filter(|t| t.reward.is_none()).collect();
        let max = self.config.train.max_reward_failures;
        if !failed.is_empty() && failed.len() as f64 > max * all.len() as f64 {
            let t = failed[0];
            return Err(TrainError::Rewards {
                step: self.step + 1,
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
        let summary = RolloutSummary::of(&all, rollout_seconds);
        let mut metrics = StepMetrics {
            step: self.step + 1,
            trajectories: all.len(),
            reward_mean: summary.reward_mean.unwrap_or(0.0),
            accuracy: accuracy_of(&all),
            trained_trajectories: trained.len(),
            dropped_groups: dropped,
            reward_failures: failed.len(),
            rounds,
            tool_calls: summary.calls(),
            parse_errors: summary.parse_errors,
            mean_turns: summary.mean_turns,
            sampled_tokens: summary.sampled_tokens,
            rollout_seconds,
            ..StepMetrics::default()
        };
        let update_start = Instant::now();
        let rows = training_rows(
            &trained,
            &RowInputs {
                algorithm: &self.config.algorithm,
                actor: &self.actor,
                reference: self.reference.as_ref(),
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
                if let Some((mean, abs_mean)) = advantage_means(&rows) {
                    metrics.advantage_mean = mean;
                    metrics.advantage_abs_mean = abs_mean;
                }
                metrics.update = policy_update(
                    &mut self.actor,
                    &mut self.critic,
                    self.reference.as_ref(),
                    &rows,
                    &self.config.train,
                );
            }
        }
        metrics.update_seconds = update_start.elapsed().as_secs_f64();
        let sync_start = Instant::now();
        if metrics.update.updates > 0 {
            self.sync_engine()?;
        }
        metrics.sync_seconds = sync_start.elapsed().as_secs_f64();
        self.step += 1;
        Ok(metrics)
    }

    /// The step's rollouts: every trajectory, those kept for training (never one without a
    /// reward), the groups dropped and the rounds rolled out.
    fn rollout_step(
        &mut self,
    ) -> Result<(Vec<Trajectory>, Vec<Trajectory>, usize, usize), TrainError> {
        let rollout = self.config.rollout.clone();
        let chain = self.config.chain.clone();
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
            let seed =
                self.config.train.seed ^ self.sampler.cursor.wrapping_mul(0xA24B_AED4_963E_E407);
            let samples = self.sampler.draw(need);
            let (trajectories, _) = self.rollout(&samples, rollout.chains, &chain, seed, |_| {})?;
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
        Ok(if dynamic {
            let dropped = filter.dropped_groups();
            (all, filter.into_trajectories(), dropped, rounds)
        } else {
            (all, scored, 0, rounds)
        })
    }
}
