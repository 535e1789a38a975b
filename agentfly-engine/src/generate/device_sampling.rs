//! Sampling a decode step's rows without bringing the whole vocabulary to the host.
//!
//! On a GPU the logits of a decode step (`[rows, vocab]`, 6 MB at 32 rows of SmolLM2's
//! 49 152 ids) would cross to the host every step only for the sampler to keep one token
//! of each row. For greedy and top-k rows the device reduces each row instead — its
//! largest logit, the log of its softmax's sum, and its k likeliest ids with their scaled
//! logits — and only those `rows × (2k + 1)` numbers come back; the sampler then makes the
//! same choice, with the same log-probability, as from the whole row
//! ([`Sampler::sample_top`]). Plain and top-p sampling may pick any id, so their rows still
//! come back whole. On Burn's CPU backend the logits are already in host memory and are read
//! in place (no copy).

use super::sampling::Sampler;
use agentfly_model::model::decode_attention::serves;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Whether a decode step on `device` samples on the device ([`sample_on_device`]) rather
/// than reading its logits: everywhere but Burn's CPU backend, where the logits already lie
/// in host memory.
pub(crate) fn reduces_on_device(device: &Device, samplers: &[&mut Sampler]) -> bool {
    !serves(device) && samplers.iter().all(|s| s.candidates().is_some())
}

/// One token for each of `live` rows of `logits` (`[rows, vocab]`, on its device), the
/// `i`-th with `samplers[i]`, each of which must have [`Sampler::candidates`]: the device
/// finds every row's likeliest ids and the log of its softmax's sum, and only those come
/// back to the host.
pub(crate) fn sample_on_device(
    mut samplers: Vec<&mut Sampler>,
    logits: Tensor<2>,
    live: &[usize],
) -> Vec<Option<(u32, f32)>> {
    let [rows, vocab] = logits.dims();
    let device = logits.device();
    let k = samplers
        .iter()
        .map(|s| {
            s.candidates()
                .expect("a sampler that chooses among the likeliest ids")
        })
        .max()
        .unwrap_or(1)
        .min(vocab);
    let mut inverse_temperature = vec![1.0f32; rows];
    for (sampler, &row) in samplers.iter().zip(live) {
        inverse_temperature[row] = sampler.inverse_temperature();
    }
    let inverse_temperature: Tensor<2> =
        Tensor::from_data(TensorData::new(inverse_temperature, [rows, 1]), &device);
    // The host's arithmetic: (logit − max) · (1 / temperature).
    let max = logits.clone().max_dim(1);
    let shifted = (logits - max) * inverse_temperature;
    let log_sum = shifted.clone().exp().sum_dim(1).log();
    let (top, ids): (Tensor<2>, Tensor<2, Int>) = shifted.topk_with_indices(k, 1);
    let floats = |t: Tensor<2>| -> Vec<f32> {
        t.into_data()
            .convert::<f32>()
            .try_into_vec()
            .expect("f32 values")
    };
    let (top, log_sum) = (floats(top), floats(log_sum));
    let ids: Vec<i64> = ids
        .into_data()
        .convert::<i64>()
        .try_into_vec()
        .expect("integer ids");
    samplers
        .iter_mut()
        .zip(live)
        .map(|(sampler, &row)| {
            let best: Vec<(u32, f32)> = (row * k..(row + 1) * k)
                .map(|i| (ids[i] as u32, top[i]))
                .collect();
            sampler.sample_top(&best, log_sum[row])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::sampling::{SamplingParams, sample_rows};
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            seed,
            ..SamplingParams::default()
        }
    }

    /// Rows sampled on the device choose what the host's sampler chooses from the whole
    /// rows, with the same log-probabilities, step after step of the samplers' streams.
    #[test]
    fn the_device_reduction_chooses_as_the_whole_row_does() {
        let vocab = 3_001;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let kinds = [
            params(0.0, 0, 1.0, 0),
            params(0.7, 5, 1.0, 1),
            params(1.0, 40, 0.9, 2),
            params(1.3, 1, 1.0, 3),
            params(0.0, 0, 1.0, 4),
            params(0.9, 200, 0.5, 5),
        ];
        let mut on_host: Vec<Sampler> = (0..kinds.len())
            .map(|i| Sampler::new(&kinds[i], i as u64))
            .collect();
        let mut on_device = on_host.clone();
        // Seven rows, of which row 3 has finished (its logits are not looked at).
        let live = [0usize, 1, 2, 4, 5, 6];
        let device = Device::flex();
        for step in 0..60 {
            let mut logits: Vec<f32> = (0..7 * vocab)
                .map(|_| rng.random::<f32>() * 12.0 - 6.0)
                .collect();
            // A tie for the largest logit in the greedy row 0: the lower id wins.
            logits[17] = 9.0;
            logits[2_900] = 9.0;
            // Ids ruled out, and a finished row that is not finite.
            for i in (5..vocab).step_by(7) {
                logits[vocab + i] = f32::NEG_INFINITY;
            }
            logits[3 * vocab + 8] = f32::NAN;
            if step == 40 {
                logits[5 * vocab + 100] = f32::NAN;
            }
            let rows: Vec<&[f32]> = live
                .iter()
                .map(|&r| &logits[r * vocab..(r + 1) * vocab])
                .collect();
            let want = sample_rows(on_host.iter_mut().collect(), rows);
            let tensor = Tensor::from_data(TensorData::new(logits.clone(), [7, vocab]), &device);
            let got = sample_on_device(on_device.iter_mut().collect(), tensor, &live);
            for (r, (want, got)) in want.iter().zip(&got).enumerate() {
                match (want, got) {
                    (Some((a, la)), Some((b, lb))) => {
                        assert_eq!(a, b, "step {step}, row {r}");
                        assert!((la - lb).abs() < 2e-5, "step {step}, row {r}: {la} vs {lb}");
                    }
                    (None, None) => assert_eq!((step, r), (40, 4), "only the NaN row"),
                    _ => panic!("step {step}, row {r}: {want:?} vs {got:?}"),
                }
            }
            assert_eq!(got[0].map(|g| g.0), Some(17), "greedy ties to the lower id");
        }
    }

    #[test]
    fn greedy_and_top_k_rows_reduce_on_the_device_off_the_cpu_backend() {
        let mut greedy = Sampler::new(&params(0.0, 0, 1.0, 0), 0);
        let mut top_k = Sampler::new(&params(0.8, 20, 0.95, 0), 1);
        let top_p = Sampler::new(&params(0.8, 0, 0.95, 0), 2);
        assert_eq!(greedy.candidates(), Some(1));
        assert_eq!(top_k.candidates(), Some(20));
        assert_eq!(top_p.candidates(), None, "top-p may choose any id");
        // The CPU backend's logits are read in place.
        assert!(!reduces_on_device(
            &Device::flex(),
            &[&mut greedy, &mut top_k]
        ));
    }
}
