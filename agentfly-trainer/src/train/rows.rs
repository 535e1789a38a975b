//! The training batch's geometry: the rows to learn from, their grouping into micro-batches
//! by a token budget, the prefix a micro-batch's rows share, and the positions a
//! micro-batch learns from. A micro-batch's rows are laid end to end in one sequence
//! (packed, each attending to itself alone) rather than padded to the longest, unless
//! packing is turned off ([`pack_rows`]).

use std::sync::atomic::{AtomicBool, Ordering};

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

/// Groups of row indices, longest first, whose size stays within `budget` tokens: the sum
/// of their lengths (packed), or `rows × longest` with packing off ([`pack_rows`]). A row
/// longer than the budget is alone.
pub fn micro_batches(lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let packed = PACK_ROWS.load(Ordering::Relaxed);
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let (mut longest, mut sum) = (0, 0);
    for i in order {
        let size = if packed {
            sum + lens[i]
        } else {
            (current.len() + 1) * lens[i].max(longest)
        };
        if !current.is_empty() && size > budget {
            out.push(std::mem::take(&mut current));
            (longest, sum) = (0, 0);
        }
        longest = longest.max(lens[i]);
        sum += lens[i];
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

/// The micro-batches of the rows `among` (indices into `rows`) within `budget` tokens,
/// counting what a micro-batch computes: its rows past the prefix they all share, which
/// runs once ([`shared_prefix`]), packed (or padded to the longest, [`pack_rows`]). Rows with the same prompt (the
/// tokens before the first they learn from: a group's chains of one sample) are packed
/// together, longest first (or in token order, when chains that sampled alike then share
/// more), so that each micro-batch runs its prompt once (a text-world group's 8 chains
/// share the system prompt and the game's first page); when packing by length alone costs
/// less (long prompts are rare, lengths vary), that packing is kept.
pub(crate) fn micro_batches_among(
    rows: &[PolicyRow],
    among: &[usize],
    budget: usize,
) -> Vec<Vec<usize>> {
    let len = |i: usize| rows[i].tokens.len();
    let by_length: Vec<Vec<usize>> = {
        let shared = shared_prefix(rows, among);
        let lens: Vec<usize> = among.iter().map(|&i| len(i) - shared).collect();
        micro_batches(&lens, budget.saturating_sub(shared).max(1))
            .into_iter()
            .map(|group| group.into_iter().map(|k| among[k]).collect())
            .collect()
    };
    let scored_everywhere = among.iter().any(|&i| rows[i].mask.is_empty());
    if among.len() < 2 || scored_everywhere || !SHARE_PREFIXES.load(Ordering::Relaxed) {
        return by_length;
    }
    // What a micro-batch holds: its rows past the shared prefix, the prefix once,
    // and the prefix's keys and values handed to every row (a layer keeps ~16 times more
    // per token than its keys and values).
    let cost = |group: &[usize]| {
        let shared = shared_prefix(rows, group);
        positions_past(rows, group, shared) + (group.len() - 1) * shared / 16
    };
    let mut clusters: Vec<Vec<usize>> = Vec::new();
    let mut cluster_of: std::collections::HashMap<&[u32], usize> = Default::default();
    for &i in among {
        let row = &rows[i];
        let prompt = &row.tokens[..(learns_from(row) + 1).min(row.tokens.len())];
        let k = *cluster_of.entry(prompt).or_insert_with(|| {
            clusters.push(Vec::new());
            clusters.len() - 1
        });
        clusters[k].push(i);
    }
    for cluster in &mut clusters {
        cluster.sort_by_key(|&i| std::cmp::Reverse(len(i)));
    }
    clusters.sort_by_key(|c| std::cmp::Reverse(len(c[0])));
    let pack = |clusters: &[Vec<usize>]| {
        let mut out: Vec<Vec<usize>> = Vec::new();
        let mut current: Vec<usize> = Vec::new();
        for &i in clusters.iter().flatten() {
            current.push(i);
            if current.len() > 1 && cost(&current) > budget {
                current.pop();
                out.push(std::mem::replace(&mut current, vec![i]));
            }
        }
        if !current.is_empty() {
            out.push(current);
        }
        out
    };
    let by_prompt = pack(&clusters);
    // Each prompt's rows in token order instead: chains that sampled alike sit side by
    // side, so a micro-batch's rows share more than the prompt ([`shared_prefix`]).
    for cluster in &mut clusters {
        cluster.sort_by(|&a, &b| rows[a].tokens.cmp(&rows[b].tokens));
    }
    let by_tokens = pack(&clusters);
    let total = |packing: &[Vec<usize>]| packing.iter().map(|g| cost(g)).sum::<usize>();
    [by_tokens, by_prompt]
        .into_iter()
        .fold(
            by_length,
            |best, p| if total(&p) < total(&best) { p } else { best },
        )
}

/// The position whose hidden state predicts the first token `row` learns from (the last
/// position when it learns from none; 0 for a row scored at every position).
fn learns_from(row: &PolicyRow) -> usize {
    if row.mask.is_empty() {
        return 0;
    }
    match row.mask.iter().position(|&m| m > 0.0) {
        Some(j) => j.saturating_sub(1),
        None => row.tokens.len().saturating_sub(1),
    }
}

/// The shortest prefix worth running once for a whole micro-batch.
const MIN_SHARED_PREFIX: usize = 16;

/// Whether training and scoring share common prefixes (the default); off only to measure
/// what sharing saves.
static SHARE_PREFIXES: AtomicBool = AtomicBool::new(true);

/// Turns the shared-prefix pass of training and scoring on (the default) or off, for the
/// whole process: the results are the same either way (up to float rounding); only the
/// time and memory differ. For benchmarks.
pub fn share_prefixes(on: bool) {
    SHARE_PREFIXES.store(on, Ordering::Relaxed);
}

/// Whether a micro-batch's rows are laid end to end in one sequence (the default) rather
/// than padded to the longest.
static PACK_ROWS: AtomicBool = AtomicBool::new(true);

/// Turns packing on (the default) or off, for the whole process: a micro-batch's rows
/// laid end to end in one sequence, each attending to itself alone, instead of padded to
/// the longest; the budget of [`micro_batches`] counts their sum instead of
/// `rows × longest`. The log-probs and gradients are the same either way (up to float
/// rounding); only the micro-batches, the time and the memory differ. For benchmarks and
/// the tests that compare the two.
pub fn pack_rows(on: bool) {
    PACK_ROWS.store(on, Ordering::Relaxed);
}

/// Whether [`pack_rows`] is on.
pub(crate) fn packs_rows() -> bool {
    PACK_ROWS.load(Ordering::Relaxed)
}

/// How many leading tokens the rows `group` all begin with, leaving each row at least one
/// token past them: what one pass computes once for all of them
/// ([`agentfly_model::model::Decoder::hidden_of_prefix_and_rows`]). Positions the rows learn from
/// may lie in it (chains that sampled the same first turn): the rows' hidden states there
/// are the prefix's. 0 for a single row, a prefix shorter than [`MIN_SHARED_PREFIX`], rows
/// to score at every position, or with sharing turned off.
pub(crate) fn shared_prefix(rows: &[PolicyRow], group: &[usize]) -> usize {
    let Some((&first, others)) = group.split_first() else {
        return 0;
    };
    let scored_everywhere = group.iter().any(|&i| rows[i].mask.is_empty());
    if others.is_empty() || scored_everywhere || !SHARE_PREFIXES.load(Ordering::Relaxed) {
        return 0;
    }
    let first = &rows[first].tokens;
    let mut shared = first.len();
    for &i in group {
        let row = &rows[i].tokens;
        let common = first.iter().zip(row).take_while(|(a, b)| a == b);
        shared = shared.min(common.count()).min(row.len().saturating_sub(1));
    }
    if shared >= MIN_SHARED_PREFIX {
        shared
    } else {
        0
    }
}

/// The positions a pass over the rows `group` runs: the rows past the prefix they share
/// (packed, or padded to the longest), and the prefix once.
pub(crate) fn computed_positions(rows: &[PolicyRow], group: &[usize]) -> usize {
    positions_past(rows, group, shared_prefix(rows, group))
}

/// The padding a pass over the rows `group` computes: none when packed; else each row's
/// positions past its end, up to the longest row's.
pub(crate) fn padding_positions(rows: &[PolicyRow], group: &[usize]) -> usize {
    if packs_rows() {
        return 0;
    }
    let lens = group.iter().map(|&i| rows[i].tokens.len());
    let longest = lens.clone().max().unwrap_or(0);
    lens.map(|len| longest - len).sum()
}

/// [`computed_positions`] with the rows' `shared` prefix already known.
fn positions_past(rows: &[PolicyRow], group: &[usize], shared: usize) -> usize {
    if packs_rows() {
        return group
            .iter()
            .map(|&i| rows[i].tokens.len() - shared)
            .sum::<usize>()
            + shared;
    }
    let longest = group
        .iter()
        .map(|&i| rows[i].tokens.len())
        .max()
        .unwrap_or(0);
    group.len() * (longest - shared) + shared
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A row: `prompt`, then `tail` learned tokens.
    fn row(prompt: &[u32], tail: usize, salt: u32) -> PolicyRow {
        let tokens: Vec<u32> = prompt
            .iter()
            .copied()
            .chain((0..tail as u32).map(|t| 1000 + salt * 100 + t))
            .collect();
        let mask = (0..tokens.len())
            .map(|t| if t >= prompt.len() { 1.0 } else { 0.0 })
            .collect();
        PolicyRow {
            tokens,
            mask,
            ..PolicyRow::default()
        }
    }

    #[test]
    fn chains_of_one_prompt_are_packed_together_to_share_it() {
        let (a, b): (Vec<u32>, Vec<u32>) = ((0..300).collect(), (500..800).collect());
        // Interleaved, with lengths that a length sort would mix across the two prompts.
        let rows: Vec<PolicyRow> = (0..8)
            .map(|k| {
                let prompt = if k % 2 == 0 { &a } else { &b };
                row(prompt, 40 + 10 * k, k as u32)
            })
            .collect();
        let among: Vec<usize> = (0..8).collect();
        let budget = 800;
        let packed = micro_batches_among(&rows, &among, budget);
        let mut seen: Vec<usize> = packed.concat();
        seen.sort();
        assert_eq!(seen, among, "every row once: {packed:?}");
        for group in &packed {
            let first = group[0] % 2;
            assert!(group.iter().all(|&i| i % 2 == first), "{packed:?}");
            let shared = shared_prefix(&rows, group);
            let longest = group.iter().map(|&i| rows[i].tokens.len()).max().unwrap();
            assert!(group.len() == 1 || group.len() * (longest - shared) + shared <= budget);
        }
        // Four rows of ~400 tokens sharing 299: two micro-batches, against 8 / 2 = 4
        // pairs (or worse) packed by length.
        assert_eq!(packed.len(), 2, "{packed:?}");
    }

    #[test]
    fn the_shared_prefix_runs_past_learned_tokens_the_rows_have_in_common() {
        let prompt: Vec<u32> = (0..40).collect();
        // Three chains that sampled the same first 20 tokens, then went apart.
        let mut rows: Vec<PolicyRow> = (0..3).map(|k| row(&prompt, 30 + 5 * k, 0)).collect();
        for (k, r) in rows.iter_mut().enumerate() {
            let at = 60 + k;
            r.tokens[at] += 500;
        }
        assert_eq!(shared_prefix(&rows, &[0, 1, 2]), 60);
        // Rows alike to the end leave each one token past the prefix.
        assert_eq!(shared_prefix(&rows, &[1, 1]), rows[1].tokens.len() - 1);
        // A single row, or a row to score at every position, shares nothing.
        assert_eq!(shared_prefix(&rows, &[0]), 0);
        rows[2].mask.clear();
        assert_eq!(shared_prefix(&rows, &[0, 1, 2]), 0);
    }

    #[test]
    fn a_pass_computes_the_shared_prefix_once_and_packs_the_rows() {
        let prompt: Vec<u32> = (0..40).collect();
        // 40 + 30, 40 + 45 and 40 + 60 tokens sharing the prompt (each row's own tokens
        // differ from their first).
        let rows: Vec<PolicyRow> = [30, 45, 60]
            .iter()
            .enumerate()
            .map(|(k, &tail)| row(&prompt, tail, k as u32))
            .collect();
        let group = [0, 1, 2];
        let shared = shared_prefix(&rows, &group);
        assert_eq!(shared, 40);
        // Packed (the default; no test in this crate turns it off): no padding.
        assert_eq!(computed_positions(&rows, &group), 30 + 45 + 60 + shared);
        assert_eq!(padding_positions(&rows, &group), 0);
    }

    #[test]
    fn rows_without_a_common_prompt_are_packed_by_length_as_before() {
        let rows: Vec<PolicyRow> = (0..6)
            .map(|k| row(&[k as u32 * 7 + 1, 2, 3], 10 + 20 * k, k as u32))
            .collect();
        let among: Vec<usize> = (0..6).collect();
        let lens: Vec<usize> = rows.iter().map(|r| r.tokens.len()).collect();
        assert_eq!(
            micro_batches_among(&rows, &among, 150),
            micro_batches(&lens, 150)
        );
        // Longest first, packed: 113 + 93 > 150, so [113], [93], then 73 + 53 = 126, and
        // 33 + 13 on their own.
        assert_eq!(
            micro_batches(&lens, 150),
            vec![vec![5], vec![4], vec![3, 2], vec![1, 0]]
        );
    }
}
