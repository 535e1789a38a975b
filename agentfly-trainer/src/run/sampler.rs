//! The training data's order: the set shuffled anew (by seed) on every pass, drawn from a
//! cursor that checkpoints record, so a resumed run draws what the interrupted one would
//! have.

use agentfly_core::Sample;
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// Draws training samples in seeded passes.
#[derive(Debug, Clone)]
pub struct Sampler {
    samples: Vec<Sample>,
    seed: u64,
    /// Samples drawn so far.
    pub cursor: u64,
}

impl Sampler {
    /// Draws from `samples` with `seed`, from the start.
    pub fn new(samples: Vec<Sample>, seed: u64) -> Self {
        Self {
            samples,
            seed,
            cursor: 0,
        }
    }

    /// The next `n` samples (none from an empty set).
    pub fn draw(&mut self, n: usize) -> Vec<Sample> {
        let len = self.samples.len() as u64;
        if len == 0 {
            return Vec::new();
        }
        (0..n)
            .map(|_| {
                let pass = self.cursor / len;
                let mut order: Vec<usize> = (0..self.samples.len()).collect();
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                    self.seed ^ pass.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                order.shuffle(&mut rng);
                let sample = self.samples[order[(self.cursor % len) as usize]].clone();
                self.cursor += 1;
                sample
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pass_draws_each_sample_once_and_resuming_draws_the_same() {
        let samples: Vec<Sample> = (0..5)
            .map(|i| Sample::new(i.to_string(), serde_json::json!({})))
            .collect();
        let mut a = Sampler::new(samples.clone(), 7);
        let drawn: Vec<String> = a.draw(10).into_iter().map(|s| s.id).collect();
        for pass in drawn.chunks(5) {
            let mut ids = pass.to_vec();
            ids.sort();
            assert_eq!(ids, ["0", "1", "2", "3", "4"]);
        }
        assert_ne!(drawn[..5], drawn[5..], "each pass is shuffled anew");
        let mut b = Sampler::new(samples, 7);
        b.cursor = 3;
        let resumed: Vec<String> = b.draw(7).into_iter().map(|s| s.id).collect();
        assert_eq!(resumed, drawn[3..]);
    }
}
