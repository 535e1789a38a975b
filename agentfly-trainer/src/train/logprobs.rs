//! Per-token log-probabilities (and entropies) of given ids, one forward pass per padded
//! micro-batch: `gather(target) − logsumexp`, never a full-vocabulary log-softmax kept
//! around.

use agentfly_model::model::{Decoder, Rope};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Sequences right-padded into one `[batch, len]` id tensor. Padding sits after each
/// sequence, so a plain causal pass gives every real position what it would alone.
#[derive(Debug, Clone)]
pub struct Packed {
    /// `[batch, len]` ids (0 after each sequence's end).
    pub ids: Tensor<2, Int>,
    /// Each sequence's length.
    pub lens: Vec<usize>,
}

impl Packed {
    /// Right-pads `sequences` (each at least 2 tokens long) to the longest.
    pub fn new(sequences: &[&[u32]], device: &Device) -> Self {
        let len = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(sequences.len() * len);
        for s in sequences {
            ids.extend(s.iter().map(|&t| i64::from(t)));
            ids.extend(std::iter::repeat_n(0i64, len - s.len()));
        }
        Self {
            ids: Tensor::from_data(TensorData::new(ids, [sequences.len(), len]), device),
            lens: sequences.iter().map(|s| s.len()).collect(),
        }
    }

    /// The padded length.
    pub fn len(&self) -> usize {
        self.ids.dims()[1]
    }

    /// No positions?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `[batch, len − 1]`: at position t, the log-probability of id t+1 given ids ..=t, and,
/// when asked, the entropy of that next-token distribution.
pub fn token_logprobs(
    decoder: &Decoder,
    rope: &Rope,
    ids: Tensor<2, Int>,
    with_entropy: bool,
) -> (Tensor<2>, Option<Tensor<2>>) {
    let [_, len] = ids.dims();
    let logits = decoder.forward(ids.clone(), rope).narrow(1, 0, len - 1);
    logprobs_from_logits(logits, ids.narrow(1, 1, len - 1), with_entropy)
}

/// The log-probability of each `targets` id `[batch, t]` under `logits` `[batch, t, vocab]`,
/// and optionally the entropies.
pub fn logprobs_from_logits(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    with_entropy: bool,
) -> (Tensor<2>, Option<Tensor<2>>) {
    let picked = logits
        .clone()
        .gather(2, targets.unsqueeze_dim::<3>(2))
        .squeeze_dim::<2>(2);
    // logsumexp, stabilised by the row maximum (a constant for the gradient).
    let max = logits.clone().max_dim(2).detach();
    let shifted = logits.clone() - max.clone();
    let exp = shifted.exp();
    let sum = exp.clone().sum_dim(2);
    let lse = sum.clone().log() + max;
    let entropy = with_entropy.then(|| {
        // H = lse − Σ p·x, with p = exp(x − max) / Σ.
        let expected = (exp * logits).sum_dim(2) / sum;
        (lse.clone() - expected).squeeze_dim::<2>(2)
    });
    (picked - lse.squeeze_dim::<2>(2), entropy)
}

/// Log-probabilities (and entropies) of the next token at chosen positions only: `picks`
/// are `(row, position)` pairs of the packed `ids` and `targets` the ids they predict. The
/// vocabulary projection — the largest matrix product of a small model — runs on those
/// positions alone, so prompts and tool observations cost only the trunk.
/// `temperature` divides the logits first: the distribution a rollout sampled from at that
/// temperature (1: the model's own).
pub fn logprobs_at(
    decoder: &Decoder,
    rope: &Rope,
    ids: Tensor<2, Int>,
    picks: &[(usize, usize)],
    targets: &[u32],
    with_entropy: bool,
    temperature: f32,
) -> AtPositions {
    let hidden = decoder.causal_hidden(ids, rope);
    logprobs_of_hidden(decoder, hidden, picks, targets, with_entropy, temperature)
}

/// What [`logprobs_at`] computes from the final hidden states `[batch, len, hidden]`
/// already at hand (`picks` index them).
pub fn logprobs_of_hidden(
    decoder: &Decoder,
    hidden: Tensor<3>,
    picks: &[(usize, usize)],
    targets: &[u32],
    with_entropy: bool,
    temperature: f32,
) -> AtPositions {
    let [batch, len, width] = hidden.dims();
    let index: Vec<usize> = picks.iter().map(|&(r, t)| r * len + t).collect();
    let chosen = select_rows(hidden.reshape([batch * len, width]), &index);
    logprobs_of_chosen(decoder, chosen, targets, with_entropy, temperature)
}

/// The rows `index` of `[n, width]` (a row may come more than once: under autodiff its
/// gradients add up).
pub(crate) fn select_rows(t: Tensor<2>, index: &[usize]) -> Tensor<2> {
    let ids = index_tensor(index, &t.device());
    t.select(0, ids)
}

/// `index` as a `[n]` id tensor on `device`.
fn index_tensor(index: &[usize], device: &Device) -> Tensor<1, Int> {
    let ids: Vec<i64> = index.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(ids, [index.len()]), device)
}

/// What [`logprobs_of_hidden`] computes from the final hidden states `[N, hidden]` of the
/// chosen positions themselves, `targets` the ids they predict.
pub(crate) fn logprobs_of_chosen(
    decoder: &Decoder,
    chosen: Tensor<2>,
    targets: &[u32],
    with_entropy: bool,
    temperature: f32,
) -> AtPositions {
    let device = chosen.device();
    let n = targets.len();
    let mut logits = decoder.logits(chosen.clone().unsqueeze_dim::<3>(0));
    if temperature != 1.0 {
        logits = logits / temperature;
    }
    let targets = Tensor::from_data(
        TensorData::new(targets.iter().map(|&t| i64::from(t)).collect(), [1, n]),
        &device,
    );
    let (lp, entropy) = logprobs_from_logits(logits, targets, with_entropy);
    AtPositions {
        logprobs: lp.squeeze_dim::<1>(0),
        entropy: entropy.map(|e| e.squeeze_dim::<1>(0)),
        hidden: chosen,
    }
}

/// What [`logprobs_at`] computes at the chosen positions.
#[derive(Debug, Clone)]
pub struct AtPositions {
    /// `[N]` log-probabilities of the targets.
    pub logprobs: Tensor<1>,
    /// `[N]` entropies, when asked.
    pub entropy: Option<Tensor<1>>,
    /// `[N, hidden]` final hidden states there (what a value head reads).
    pub hidden: Tensor<2>,
}

impl AtPositions {
    /// The positions `index` of these, in that order (one may come more than once: under
    /// autodiff its gradients add up).
    pub(crate) fn at(self, index: &[usize]) -> Self {
        let ids = index_tensor(index, &self.logprobs.device());
        Self {
            logprobs: self.logprobs.select(0, ids.clone()),
            entropy: self.entropy.map(|e| e.select(0, ids.clone())),
            hidden: self.hidden.select(0, ids),
        }
    }
}
