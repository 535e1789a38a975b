//! Choosing the next token from a row of logits, on the host.

use agentfly_core::chat::Tokenizer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
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
    /// `exp((logit − max) / temperature)` per id: the unnormalised probabilities of the
    /// last call, kept to reuse the allocation.
    weights: Vec<f32>,
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
            weights: Vec::new(),
        }
    }

    /// Picks a token from `logits`; returns it with its log-probability under
    /// `softmax(logits / temperature)` (temperature 1 when greedy), before any top-k /
    /// top-p truncation — the distribution the trainer recomputes. `None` when the logits
    /// are not finite (NaN, or no finite value): no token can honestly be chosen.
    ///
    /// One pass finds the largest logit, one computes every id's unnormalised probability
    /// (a vectorised `exp`, within 2e-7 of the standard one) and their sum, and a draw walks
    /// them once: the vocabulary is exponentiated once per token.
    pub fn sample(&mut self, logits: &[f32]) -> Option<(u32, f32)> {
        let inv_t = self.inverse_temperature();
        let (max, nan) = max_and_nan(logits);
        if nan || !max.is_finite() {
            return None;
        }
        self.weights.clear();
        self.weights
            .extend(logits.iter().map(|&x| exp_nonpositive((x - max) * inv_t)));
        let log_sum = sum(&self.weights).ln();
        let id = if self.temperature <= 0.0 {
            first_index_of(logits, max)
        } else {
            self.draw()
        };
        Some((id as u32, (logits[id] - max) * inv_t - log_sum))
    }

    /// Draws an id from `self.weights` (unnormalised), after top-k / top-p truncation.
    fn draw(&mut self) -> usize {
        let weights = &self.weights;
        if self.top_k == 0 && self.top_p >= 1.0 {
            let mut target = self.rng.random::<f32>() * sum(weights);
            for (id, w) in weights.iter().enumerate() {
                target -= w;
                if target <= 0.0 {
                    return id;
                }
            }
            return weights.iter().rposition(|&w| w > 0.0).unwrap_or(0);
        }
        let total = sum(weights);
        let mut candidates: Vec<(usize, f32)> = weights.iter().copied().enumerate().collect();
        if self.top_k > 0 && self.top_k < candidates.len() {
            candidates.select_nth_unstable_by(self.top_k - 1, best_first);
            candidates.truncate(self.top_k);
        }
        self.draw_among(candidates, total)
    }

    /// Draws an id from `candidates` (ids with unnormalised weights; every id top-k keeps,
    /// or all of them, in any order) out of a row of weights summing to `total`: best
    /// first (ties to the lower id), cut to top-k and then to top-p, drawn in that order.
    fn draw_among(&mut self, mut candidates: Vec<(usize, f32)>, total: f32) -> usize {
        candidates.sort_unstable_by(best_first);
        if self.top_k > 0 {
            candidates.truncate(self.top_k);
        }
        if self.top_p < 1.0 {
            let mut mass = 0.0;
            let mut keep = candidates.len();
            for (i, (_, w)) in candidates.iter().enumerate() {
                mass += w / total;
                if mass >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
            candidates.truncate(keep.max(1));
        }
        let mass: f32 = candidates.iter().map(|c| c.1).sum();
        let mut target = self.rng.random::<f32>() * mass;
        for (id, w) in &candidates {
            target -= w;
            if target <= 0.0 {
                return *id;
            }
        }
        candidates.last().map_or(0, |c| c.0)
    }

    /// How many of a row's likeliest tokens this sampler chooses among: 1 when greedy, k
    /// under top-k; `None` when it may choose any token (plain or top-p sampling), which
    /// takes the whole row.
    pub(crate) fn candidates(&self) -> Option<usize> {
        if self.temperature <= 0.0 {
            Some(1)
        } else if self.top_k > 0 {
            Some(self.top_k)
        } else {
            None
        }
    }

    /// `1 / temperature`, or 1 when greedy: what a row's distances from its largest logit
    /// are multiplied by.
    pub(crate) fn inverse_temperature(&self) -> f32 {
        if self.temperature > 0.0 {
            1.0 / self.temperature
        } else {
            1.0
        }
    }

    /// [`Sampler::sample`] from a row's likeliest tokens alone: `top` holds at least
    /// [`Sampler::candidates`] ids (any order), each with `(logit − max) ·`
    /// [`Sampler::inverse_temperature`] (`max` the row's largest logit), and `log_sum` is
    /// the log of the sum of `exp` of that over the whole row. The same choice and
    /// log-probability as from the whole row, up to the rounding of the sum; `None` when
    /// `log_sum` is not finite (the row's logits were not).
    pub(crate) fn sample_top(&mut self, top: &[(u32, f32)], log_sum: f32) -> Option<(u32, f32)> {
        if !log_sum.is_finite() {
            return None;
        }
        let shifted = top.iter().map(|&(id, s)| (id as usize, s));
        let id = if self.temperature <= 0.0 {
            shifted.min_by(best_first)?.0
        } else {
            let weights = shifted.map(|(id, s)| (id, exp_nonpositive(s))).collect();
            self.draw_among(weights, log_sum.exp())
        };
        let logit = top.iter().find(|c| c.0 as usize == id)?.1;
        Some((id as u32, logit - log_sum))
    }
}

/// Larger weights first, ties to the lower id.
fn best_first(a: &(usize, f32), b: &(usize, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// From this many rows on, a decode step samples its rows on every core.
const PARALLEL_SAMPLING_ROWS: usize = 4;

/// One token for each of `rows` (a row of logits each), each with its own sampler. Each
/// sampler has its own seeded stream, so sampling the rows on every core draws the same
/// tokens as one after the other (a few rows are not worth the threads).
pub(crate) fn sample_rows(
    mut samplers: Vec<&mut Sampler>,
    rows: Vec<&[f32]>,
) -> Vec<Option<(u32, f32)>> {
    if samplers.len() >= PARALLEL_SAMPLING_ROWS {
        samplers
            .par_iter_mut()
            .zip(rows)
            .map(|(sampler, row)| sampler.sample(row))
            .collect()
    } else {
        samplers
            .iter_mut()
            .zip(rows)
            .map(|(sampler, row)| sampler.sample(row))
            .collect()
    }
}

/// `exp(x)` for `x ≤ 0` (0 below −87, where `f32` has no normal result): Cephes' `expf` —
/// `x = n·ln 2 + r`, a degree-7 polynomial in `r`, `2ⁿ` put in the exponent bits — written
/// without branches, calls or conversions so that a loop over it vectorises (4× the
/// standard `exp` on SSE2). Relative error below 2e-7.
#[inline]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 · 2²³: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let clamped = if x > -87.0 { x } else { -87.0 };
    let n = (clamped * LOG2E + ROUND) - ROUND;
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let r2 = r * r;
    let p = (((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2)
        * r
        + 0.166_666_65)
        * r
        + 0.5)
        * r2
        + r
        + 1.0;
    // n + 127 in the low mantissa bits of a float of ROUND's exponent, moved to the
    // exponent bits: 2ⁿ, without a float-to-integer conversion (which would not vectorise).
    let biased = n + (ROUND + 127.0);
    let scale = f32::from_bits(biased.to_bits().wrapping_sub(ROUND.to_bits()) << 23);
    if x < -87.0 { 0.0 } else { p * scale }
}

/// The sum of `values`, in eight running sums (vectorised, and nearer the exact sum than
/// one running sum).
fn sum(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = values.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// The largest of `values` (−∞ for none), and whether any is NaN: sixteen lanes, so that
/// the pass vectorises.
fn max_and_nan(values: &[f32]) -> (f32, bool) {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut nan = false;
    let chunks = values.chunks_exact(16);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            nan |= x.is_nan();
            *lane = if x > *lane { x } else { *lane };
        }
    }
    for &x in rest {
        nan |= x.is_nan();
        lanes[0] = if x > lanes[0] { x } else { lanes[0] };
    }
    let max = lanes
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, |m, x| if x > m { x } else { m });
    (max, nan)
}

/// The first index whose value equals `max` (the argmax, ties to the lowest id), looked
/// for sixteen values at a time.
fn first_index_of(values: &[f32], max: f32) -> usize {
    let chunks = values.chunks_exact(16);
    let tail = values.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        if chunk.iter().fold(false, |hit, &x| hit | (x == max)) {
            return c * 16 + chunk.iter().position(|&x| x == max).unwrap_or(0);
        }
    }
    tail + values[tail..].iter().position(|&x| x == max).unwrap_or(0)
}

/// Whether the tail of `ids` now contains one of `stop_strings`.
pub(crate) fn hits_stop_string(
    ids: &[u32],
    stop_strings: &[String],
    tokenizer: Option<&Tokenizer>,
) -> bool {
    if stop_strings.is_empty() {
        return false;
    }
    let Some(tokenizer) = tokenizer else {
        return false;
    };
    // Only the tail can newly contain a stop string: decode the last few tokens.
    let longest = stop_strings.iter().map(|s| s.len()).max().unwrap_or(0);
    let tail = &ids[ids.len().saturating_sub(longest + 2)..];
    let text = tokenizer.decode(tail, false).unwrap_or_default();
    stop_strings.iter().any(|s| text.contains(s.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_matches_a_plain_argmax_and_log_softmax() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for len in [1usize, 7, 16, 17, 49_152] {
            for case in 0..4 {
                let mut logits: Vec<f32> = (0..len)
                    .map(|_| rng.random::<f32>() * 20.0 - 10.0)
                    .collect();
                match case {
                    // Ties: the lowest id wins.
                    1 => {
                        let top = logits.iter().copied().fold(f32::MIN, f32::max) + 1.0;
                        for i in [len / 2, len - 1, len / 3] {
                            logits[i] = top;
                        }
                    }
                    2 => logits
                        .iter_mut()
                        .step_by(3)
                        .for_each(|x| *x = f32::NEG_INFINITY),
                    3 => logits[len - 1] = 50.0,
                    _ => {}
                }
                if logits.iter().all(|x| x.is_infinite()) {
                    logits[0] = 0.0;
                }
                let mut want = 0;
                for (i, &x) in logits.iter().enumerate() {
                    if x > logits[want] {
                        want = i;
                    }
                }
                let max = f64::from(logits[want]);
                let log_sum = logits
                    .iter()
                    .map(|&x| (f64::from(x) - max).exp())
                    .sum::<f64>()
                    .ln();
                let (id, lp) = Sampler::new(&SamplingParams::greedy(1), 0)
                    .sample(&logits)
                    .unwrap();
                assert_eq!(id as usize, want, "len {len}, case {case}");
                assert!(
                    (f64::from(lp) + log_sum).abs() < 1e-5,
                    "len {len}, case {case}: {lp}"
                );
            }
        }
        let mut nan = vec![0.0f32; 40];
        nan[33] = f32::NAN;
        assert!(
            Sampler::new(&SamplingParams::greedy(1), 0)
                .sample(&nan)
                .is_none()
        );
    }

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
    fn the_vectorised_exp_is_within_2e7_of_the_standard_one() {
        let mut worst = 0.0f32;
        for i in 0..=2_000_000 {
            let x = -87.0 * i as f32 / 2_000_000.0;
            let (got, want) = (exp_nonpositive(x), x.exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 2e-7, "largest relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-90.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn sampling_follows_the_softmax_and_reports_its_log_probability() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 / 25.0).collect();
        let temperature = 0.7f32;
        let scaled: Vec<f64> = logits.iter().map(|&x| f64::from(x / temperature)).collect();
        let lse = scaled.iter().map(|x| x.exp()).sum::<f64>().ln();
        let mut s = Sampler::new(
            &SamplingParams {
                temperature,
                seed: 3,
                ..SamplingParams::default()
            },
            0,
        );
        let mut counts = vec![0usize; logits.len()];
        let draws = 200_000;
        for _ in 0..draws {
            let (id, lp) = s.sample(&logits).unwrap();
            let want = scaled[id as usize] - lse;
            assert!((f64::from(lp) - want).abs() < 1e-5, "{lp} vs {want}");
            counts[id as usize] += 1;
        }
        // The ten likeliest ids are drawn as often as softmax says, within 5 standard
        // deviations.
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| scaled[b].total_cmp(&scaled[a]));
        for &id in &order[..10] {
            let p = (scaled[id] - lse).exp();
            let expected = p * draws as f64;
            let sd = (expected * (1.0 - p)).sqrt();
            let got = counts[id] as f64;
            assert!(
                (got - expected).abs() < 5.0 * sd,
                "id {id}: {got} vs {expected:.0}"
            );
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
