//! Choosing the next token from a row of logits, on the host.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// How tokens are chosen and when generation stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Most new tokens per sequence.
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: off).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1: off).
    pub top_p: f32,
    /// Seed of the sampler; sequence i of a batch uses a stream derived from (seed, i).
    pub seed: u64,
    /// Ids that end a sequence (the model's EOS ids are added unless `ignore_eos`).
    pub stop_ids: Vec<u32>,
    /// Texts that end a sequence once the decoded output contains them.
    pub stop_strings: Vec<String>,
    /// Do not stop at the model's end-of-sequence ids.
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 128,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            stop_ids: Vec::new(),
            stop_strings: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding of up to `max_new_tokens`.
    pub fn greedy(max_new_tokens: usize) -> Self {
        Self {
            max_new_tokens,
            ..Self::default()
        }
    }
}

/// A seeded sampler for one sequence.
#[derive(Debug, Clone)]
pub struct Sampler {
    rng: ChaCha8Rng,
    temperature: f32,
    top_k: usize,
    top_p: f32,
}

impl Sampler {
    /// The sampler of sequence `index` under `params`.
    pub fn new(params: &SamplingParams, index: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
        rng.set_stream(index);
        Self {
            rng,
            temperature: params.temperature,
            top_k: params.top_k,
            top_p: params.top_p,
        }
    }

    /// Picks a token from `logits`; returns it with its log-probability under
    /// `softmax(logits / temperature)` (temperature 1 when greedy), before any top-k /
    /// top-p truncation — the distribution the trainer recomputes. `None` when the logits
    /// are not finite (NaN, or no finite value): no token can honestly be chosen.
    pub fn sample(&mut self, logits: &[f32]) -> Option<(u32, f32)> {
        let temperature = if self.temperature > 0.0 {
            self.temperature
        } else {
            1.0
        };
        let scaled: Vec<f32> = logits.iter().map(|x| x / temperature).collect();
        if scaled.iter().any(|x| x.is_nan()) {
            return None;
        }
        let max = scaled.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return None;
        }
        let lse = max + scaled.iter().map(|x| (x - max).exp()).sum::<f32>().ln();
        let id = if self.temperature <= 0.0 {
            argmax(&scaled)
        } else {
            self.draw(&scaled, lse)
        };
        Some((id as u32, scaled[id] - lse))
    }

    fn draw(&mut self, scaled: &[f32], lse: f32) -> usize {
        let mut candidates: Vec<(usize, f32)> = scaled
            .iter()
            .enumerate()
            .map(|(i, x)| (i, (x - lse).exp()))
            .collect();
        let truncate = self.top_k > 0 || self.top_p < 1.0;
        if truncate {
            candidates.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            if self.top_k > 0 {
                candidates.truncate(self.top_k);
            }
            if self.top_p < 1.0 {
                let mut total = 0.0;
                let mut keep = candidates.len();
                for (i, (_, p)) in candidates.iter().enumerate() {
                    total += p;
                    if total >= self.top_p {
                        keep = i + 1;
                        break;
                    }
                }
                candidates.truncate(keep.max(1));
            }
        }
        let mass: f32 = candidates.iter().map(|c| c.1).sum();
        let mut target = self.rng.random::<f32>() * mass;
        for (id, p) in &candidates {
            target -= p;
            if target <= 0.0 {
                return *id;
            }
        }
        candidates.last().map_or(0, |c| c.0)
    }
}

fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_argmax_with_its_log_probability() {
        let mut s = Sampler::new(&SamplingParams::greedy(1), 0);
        let (id, lp) = s.sample(&[0.0, 2.0, 1.0]).unwrap();
        assert_eq!(id, 1);
        let expected = 2.0 - (1.0f32 + 2.0f32.exp() + 1.0f32.exp()).ln();
        assert!((lp - expected).abs() < 1e-6);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            seed: 7,
            ..SamplingParams::default()
        };
        let logits = [1.0, 0.5, 3.0, 2.9, -1.0];
        let run = |index| {
            let mut s = Sampler::new(&params, index);
            (0..200)
                .map(|_| s.sample(&logits).unwrap().0)
                .collect::<Vec<_>>()
        };
        let a = run(0);
        assert_eq!(a, run(0));
        assert_ne!(a, run(1));
        assert!(
            a.iter().all(|&id| id == 2 || id == 3),
            "top-k 2 keeps ids 2 and 3"
        );
        assert!(a.contains(&2) && a.contains(&3));
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            seed: 1,
            ..SamplingParams::default()
        };
        let mut s = Sampler::new(&params, 0);
        // probabilities ~ [0.66, 0.24, 0.09]: p = 0.5 keeps only the first.
        for _ in 0..50 {
            assert_eq!(s.sample(&[2.0, 1.0, 0.0]).unwrap().0, 0);
        }
    }

    #[test]
    fn logits_that_are_not_finite_choose_no_token() {
        for temperature in [0.0, 0.8] {
            let mut s = Sampler::new(
                &SamplingParams {
                    temperature,
                    top_p: 0.9,
                    ..SamplingParams::default()
                },
                0,
            );
            assert_eq!(s.sample(&[0.5, f32::NAN, 1.0]), None);
            assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]), None);
            assert_eq!(s.sample(&[0.0, f32::INFINITY]), None);
            assert!(s.sample(&[0.0, f32::NEG_INFINITY, 1.0]).is_some());
        }
    }
}
