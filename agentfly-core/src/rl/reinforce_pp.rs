//! REINFORCE++: per-token returns with a KL penalty, whitened over the batch.

use super::scored::{STD_EPS, Scored, mean};

/// REINFORCE++: per sampled token t, `G_t = Σ_{k ≥ t} γ^(k-t) r_k` over sampled tokens,
/// with `r_k = -kl_coef · kl_k` plus the reward on the last sampled token; then whitened
/// (mean 0, std 1) over every sampled token of the batch.
pub fn reinforce_pp(
    items: &[Scored<'_>],
    kl: &[Vec<f32>],
    kl_coef: f32,
    gamma: f32,
) -> Vec<Vec<f32>> {
    let mut out: Vec<Vec<f32>> = items.iter().map(|i| vec![0.0; i.mask.len()]).collect();
    for ((item, kl), row) in items.iter().zip(kl).zip(&mut out) {
        let steps: Vec<usize> = (0..item.mask.len())
            .filter(|&t| item.mask[t] == 1)
            .collect();
        let mut g = 0.0;
        for (n, &t) in steps.iter().enumerate().rev() {
            let mut r = -kl_coef * kl[t];
            if n + 1 == steps.len() {
                r += item.reward;
            }
            g = r + gamma * g;
            row[t] = g;
        }
    }
    whiten(items, &mut out);
    out
}

/// Mean 0, standard deviation 1 over the sampled tokens of the whole batch.
fn whiten(items: &[Scored<'_>], values: &mut [Vec<f32>]) {
    let sampled: Vec<f32> = items
        .iter()
        .zip(values.iter())
        .flat_map(|(i, v)| {
            i.mask
                .iter()
                .zip(v)
                .filter(|(m, _)| **m == 1)
                .map(|(_, x)| *x)
        })
        .collect();
    if sampled.is_empty() {
        return;
    }
    let m = mean(&sampled);
    let std = (sampled.iter().map(|x| (x - m).powi(2)).sum::<f32>() / sampled.len() as f32).sqrt();
    for (item, row) in items.iter().zip(values.iter_mut()) {
        for (x, &mask) in row.iter_mut().zip(item.mask) {
            *x = if mask == 1 {
                (*x - m) / (std + STD_EPS)
            } else {
                0.0
            };
        }
    }
}
