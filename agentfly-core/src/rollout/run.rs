//! Many chains: every sample × n chains, a bounded number at a time, and what they add
//! up to.

use super::chain::ChainSetup;
use super::trajectory::{ChainEnd, Trajectory};
use crate::Sample;
use crate::env::EnvPools;
use crate::tool::CallContext;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

/// Samples × chains over one policy, toolbox and set of environment pools.
pub struct Rollout<'a> {
    /// What every chain shares.
    pub setup: ChainSetup<'a>,
    /// The environments chains lease from.
    pub pools: EnvPools,
    /// Chains per sample (the group of GRPO / RLOO).
    pub chains: usize,
    /// The most chains running at once.
    pub concurrency: usize,
    /// The run's seed: chain `c` of sample `i` samples with a seed derived from
    /// `(seed, i, c)`, so a run is reproducible whatever order chains finish in.
    pub seed: u64,
}

/// What a rollout produced.
#[derive(Debug, Clone)]
pub struct RolloutOutput {
    /// Every trajectory, ordered by sample then chain.
    pub trajectories: Vec<Trajectory>,
    /// What they add up to.
    pub summary: RolloutSummary,
}

/// The seed of chain `chain` of sample `index` (SplitMix64 of the three).
pub fn chain_seed(seed: u64, index: usize, chain: usize) -> u64 {
    let mut z = seed
        ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (chain as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rollout<'_> {
    /// Runs `chains` chains of every sample, at most `concurrency` at once; `on_done` sees
    /// each trajectory as its chain ends (a progress bar, a log).
    pub async fn run(
        &self,
        samples: &[Sample],
        mut on_done: impl FnMut(&Trajectory),
    ) -> RolloutOutput {
        let start = Instant::now();
        let jobs = samples
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..self.chains).map(move |c| (i, s, c)));
        let mut running = futures_util::stream::iter(jobs)
            .map(|(i, sample, chain)| async move {
                let ctx = CallContext::with_pools(self.pools.clone());
                let seed = chain_seed(self.seed, i, chain);
                let trajectory = self.setup.run(sample, chain, seed, ctx).await;
                (i, trajectory)
            })
            .buffer_unordered(self.concurrency.max(1));
        let mut done = Vec::with_capacity(samples.len() * self.chains);
        while let Some((i, trajectory)) = running.next().await {
            on_done(&trajectory);
            done.push((i, trajectory));
        }
        done.sort_by_key(|(i, t)| (*i, t.chain));
        let trajectories: Vec<Trajectory> = done.into_iter().map(|(_, t)| t).collect();
        let summary = RolloutSummary::of(&trajectories, start.elapsed().as_secs_f64());
        RolloutOutput {
            trajectories,
            summary,
        }
    }
}

/// What a set of trajectories adds up to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RolloutSummary {
    /// Distinct samples.
    pub samples: usize,
    /// Trajectories.
    pub trajectories: usize,
    /// Mean reward over the scored trajectories (`None` when none was scored).
    pub reward_mean: Option<f64>,
    /// Trajectories whose reward could not be computed.
    pub reward_errors: usize,
    /// Tool calls per tool name (unreadable calls under `""`).
    pub calls_per_tool: BTreeMap<String, usize>,
    /// Calls that could not be read (malformed JSON, missing fields).
    pub parse_errors: usize,
    /// Failed calls per kind of error (`parse error`, `unknown tool`, `timed out`, …).
    pub errors_per_kind: BTreeMap<String, usize>,
    /// How chains ended.
    pub finish_reasons: BTreeMap<String, usize>,
    /// Mean model turns per trajectory.
    pub mean_turns: f64,
    /// Tokens the model sampled, in all trajectories.
    pub sampled_tokens: usize,
    /// All tokens (prompts and observations included).
    pub total_tokens: usize,
    /// Wall-clock seconds of the rollout.
    pub wall_seconds: f64,
    /// Chain-seconds spent waiting for generation (summed over chains).
    pub generate_seconds: f64,
    /// Chain-seconds spent in tools (summed over chains).
    pub tool_seconds: f64,
    /// The first reason of each kind of error, with its sample: `reward` (the reward
    /// could not be computed), `chain` (the chain ended in an error), and each kind of
    /// failed call.
    pub first_errors: BTreeMap<String, String>,
}

/// At most this many characters of a reason are kept in a summary.
const REASON_CHARS: usize = 300;

fn reason(sample: &str, text: &str) -> String {
    let mut text: String = text.trim().chars().take(REASON_CHARS).collect();
    if text.chars().count() == REASON_CHARS {
        text.push('…');
    }
    format!("sample {sample}: {text}")
}

fn finish_name(end: ChainEnd) -> String {
    serde_json::to_value(end)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{end:?}"))
}

impl RolloutSummary {
    /// Adds up `trajectories`, which took `wall_seconds`.
    pub fn of(trajectories: &[Trajectory], wall_seconds: f64) -> Self {
        let mut s = Self {
            trajectories: trajectories.len(),
            wall_seconds,
            ..Self::default()
        };
        let mut ids: Vec<&str> = trajectories.iter().map(|t| t.sample_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        s.samples = ids.len();
        let rewards: Vec<f64> = trajectories
            .iter()
            .filter_map(|t| t.reward.map(f64::from))
            .collect();
        if !rewards.is_empty() {
            s.reward_mean = Some(rewards.iter().sum::<f64>() / rewards.len() as f64);
        }
        let mut turns = 0;
        for t in trajectories {
            s.reward_errors += usize::from(t.reward_error.is_some());
            if let Some(e) = &t.reward_error {
                s.first_errors
                    .entry("reward".into())
                    .or_insert_with(|| reason(&t.sample_id, e));
            }
            if let (ChainEnd::Error, Some(e)) = (t.finish_reason, &t.error) {
                s.first_errors
                    .entry("chain".into())
                    .or_insert_with(|| reason(&t.sample_id, e));
            }
            *s.finish_reasons
                .entry(finish_name(t.finish_reason))
                .or_default() += 1;
            turns += t.num_turns();
            s.sampled_tokens += t.sampled_tokens();
            s.total_tokens += t.tokens.len();
            for turn in &t.turns {
                s.generate_seconds += turn.generate_seconds;
                s.tool_seconds += turn.tool_seconds;
            }
            for call in t.calls() {
                *s.calls_per_tool.entry(call.name.clone()).or_default() += 1;
                if let Some(kind) = &call.error {
                    *s.errors_per_kind.entry(kind.clone()).or_default() += 1;
                    s.first_errors
                        .entry(kind.clone())
                        .or_insert_with(|| reason(&t.sample_id, &call.observation));
                    s.parse_errors += usize::from(kind == "parse error");
                }
            }
        }
        if !trajectories.is_empty() {
            s.mean_turns = turns as f64 / trajectories.len() as f64;
        }
        s
    }

    /// All tool calls.
    pub fn calls(&self) -> usize {
        self.calls_per_tool.values().sum()
    }
}

impl fmt::Display for RolloutSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |map: &BTreeMap<String, usize>| {
            if map.is_empty() {
                return "none".to_string();
            }
            map.iter()
                .map(|(k, v)| {
                    let k = if k.is_empty() { "(unreadable)" } else { k };
                    format!("{k} {v}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(
            f,
            "trajectories   {} ({} samples)",
            self.trajectories, self.samples
        )?;
        match self.reward_mean {
            Some(mean) => writeln!(f, "reward mean    {mean:.4}")?,
            None => writeln!(f, "reward mean    (not scored)")?,
        }
        if self.reward_errors > 0 {
            writeln!(f, "reward errors  {}", self.reward_errors)?;
        }
        writeln!(
            f,
            "tool calls     {} ({})",
            self.calls(),
            list(&self.calls_per_tool)
        )?;
        writeln!(f, "parse errors   {}", self.parse_errors)?;
        writeln!(f, "call errors    {}", list(&self.errors_per_kind))?;
        writeln!(f, "finish reasons {}", list(&self.finish_reasons))?;
        for (kind, why) in &self.first_errors {
            let kind = match kind.as_str() {
                "reward" => "reward error",
                "chain" => "chain error",
                other => other,
            };
            writeln!(f, "  first {kind}: {why}")?;
        }
        writeln!(f, "mean turns     {:.2}", self.mean_turns)?;
        writeln!(
            f,
            "tokens         {} sampled, {} in all",
            self.sampled_tokens, self.total_tokens
        )?;
        write!(
            f,
            "wall time      {:.1} s ({:.1} tokens/s sampled)",
            self.wall_seconds,
            self.sampled_tokens as f64 / self.wall_seconds.max(1e-9)
        )
    }
}
