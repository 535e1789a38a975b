//! Generalised advantage estimation with a critic's values (PPO).

use super::scored::Scored;

/// GAE over the sampled tokens of each item: the reward comes at the last sampled token,
/// `δ_t = r_t + γ V(next sampled token) − V(t)` (0 after the last), `A_t = δ_t + γλ A_next`.
/// Returns the advantages and the value targets `A + V`.
pub fn gae(
    items: &[Scored<'_>],
    values: &[Vec<f32>],
    gamma: f32,
    lambda: f32,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut advantages = Vec::with_capacity(items.len());
    let mut returns = Vec::with_capacity(items.len());
    for (item, v) in items.iter().zip(values) {
        let mut a = vec![0.0; item.mask.len()];
        let mut ret = vec![0.0; item.mask.len()];
        let steps: Vec<usize> = (0..item.mask.len())
            .filter(|&t| item.mask[t] == 1)
            .collect();
        let (mut next_value, mut next_adv) = (0.0, 0.0);
        for (n, &t) in steps.iter().enumerate().rev() {
            let r = if n + 1 == steps.len() {
                item.reward
            } else {
                0.0
            };
            let delta = r + gamma * next_value - v[t];
            next_adv = delta + gamma * lambda * next_adv;
            a[t] = next_adv;
            ret[t] = next_adv + v[t];
            next_value = v[t];
        }
        advantages.push(a);
        returns.push(ret);
    }
    (advantages, returns)
}
