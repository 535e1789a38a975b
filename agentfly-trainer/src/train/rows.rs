//! The training batch's geometry: the rows to learn from, their grouping into micro-batches
//! by a padded-token budget, and the positions a micro-batch learns from.

/// One sequence to learn from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyRow {
    /// Every token (prompt, sampled ids, observations).
    pub tokens: Vec<u32>,
    /// Per token: 1 where the loss applies (the sampled ids), else 0. Empty: every
    /// position (scoring only).
    pub mask: Vec<f32>,
    /// Per token: its advantage.
    pub advantages: Vec<f32>,
    /// Per token: the critic's target (GAE's returns); empty without a critic.
    pub returns: Vec<f32>,
    /// Per token: the critic's values when the batch was rolled out; empty without one.
    pub old_values: Vec<f32>,
    /// Per token: the log-prob the rollout recorded when it sampled the token (`None`
    /// where the environment wrote it); empty when unknown. Compared with the trainer's.
    pub rollout_logprobs: Vec<Option<f32>>,
}

impl PolicyRow {
    /// A row to score every position of (no mask, no advantages).
    pub fn scoring(tokens: &[u32]) -> Self {
        Self {
            tokens: tokens.to_vec(),
            ..Self::default()
        }
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

/// The micro-batches of `rows` within `budget` padded tokens.
pub(crate) fn micro_batches_of(rows: &[PolicyRow], budget: usize) -> Vec<Vec<usize>> {
    let all: Vec<usize> = (0..rows.len()).collect();
    micro_batches_among(rows, &all, budget)
}

/// The micro-batches of the rows `among` (indices into `rows`).
pub(crate) fn micro_batches_among(
    rows: &[PolicyRow],
    among: &[usize],
    budget: usize,
) -> Vec<Vec<usize>> {
    let lens: Vec<usize> = among.iter().map(|&i| rows[i].tokens.len()).collect();
    micro_batches(&lens, budget.max(1))
        .into_iter()
        .map(|group| group.into_iter().map(|k| among[k]).collect())
        .collect()
}

/// `0..n` in `parts` contiguous chunks of (nearly) equal size; fewer when `n < parts`.
pub(crate) fn split(n: usize, parts: usize) -> Vec<Vec<usize>> {
    let size = n.div_ceil(parts.max(1)).max(1);
    (0..n)
        .collect::<Vec<_>>()
        .chunks(size)
        .map(<[usize]>::to_vec)
        .collect()
}

/// The positions a micro-batch learns from.
pub(crate) struct Picks {
    /// `(row in the group, position)` pairs of the packed batch.
    pub picks: Vec<(usize, usize)>,
    /// The ids they predict.
    pub targets: Vec<u32>,
    /// `(row, position)` to read per-row values with.
    pub at: Vec<(usize, usize)>,
}

/// The learned positions of the rows `group` of `rows`; a row without a mask (scoring
/// only) has every position.
pub(crate) fn picks(rows: &[PolicyRow], group: &[usize]) -> Picks {
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

/// The rows' masks from the second token on (what each predicted position learns).
pub(crate) fn learned_masks(rows: &[PolicyRow]) -> Vec<Vec<f32>> {
    rows.iter().map(|r| r.mask[1..].to_vec()).collect()
}
