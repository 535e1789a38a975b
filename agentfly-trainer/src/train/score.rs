//! Forward passes at the learned positions: with gradient inside an update, without to
//! score a batch (old and reference log-probs, the critic's values).

use super::logprobs::{AtPositions, Packed, logprobs_of_chosen, logprobs_of_hidden, select_rows};
use super::rows::{Picks, PolicyRow, packs_rows, picks, shared_prefix};
use super::value::ValueHead;
use agentfly_model::model::{Decoder, Rope};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::collections::HashMap;

/// The learned positions of one micro-batch and what `decoder` computes there at
/// `temperature`, or `None` when the group has nothing to learn. Rows that begin with the
/// same tokens (a system prompt, a question, a first turn that every chain sampled alike)
/// run that prefix through the network once ([`Decoder::hidden_after_prefix`]); a
/// position of the prefix that the rows learn from is computed once for all of them, and
/// its gradient is the sum of theirs. Past the prefix, the rows are laid end to end in one
/// sequence ([`Decoder::hidden_of_spans`]; padded to the longest with packing off,
/// [`super::rows::pack_rows`]).
pub(crate) fn pass(
    decoder: &Decoder,
    rope: &Rope,
    rows: &[PolicyRow],
    group: &[usize],
    with_entropy: bool,
    temperature: f32,
) -> Option<(Picks, AtPositions)> {
    let found = picks(rows, group);
    if found.picks.is_empty() {
        return None;
    }
    let device = decoder.embed.val().device();
    let shared = shared_prefix(rows, group);
    let rest = Rest::new(rows, group, shared, &device);
    let got = if shared > 0 {
        let prefix = Packed::new(&[&rows[group[0]].tokens[..shared]], &device).ids;
        if found.picks.iter().all(|&(_, t)| t >= shared) {
            let hidden = match &rest.spans {
                Some(spans) => {
                    decoder.hidden_after_prefix_of_spans(prefix, rest.ids.clone(), spans, rope)
                }
                None => decoder.hidden_after_prefix(prefix, rest.ids.clone(), rope),
            };
            let picks: Vec<(usize, usize)> =
                found.picks.iter().map(|&(k, t)| rest.place(k, t)).collect();
            logprobs_of_hidden(
                decoder,
                hidden,
                &picks,
                &found.targets,
                with_entropy,
                temperature,
            )
        } else {
            let both = match &rest.spans {
                Some(spans) => {
                    decoder.hidden_of_prefix_and_spans(prefix, rest.ids.clone(), spans, rope)
                }
                None => decoder.hidden_of_prefix_and_rows(prefix, rest.ids.clone(), rope),
            };
            within_prefix(decoder, both, &found, &rest, with_entropy, temperature)
        }
    } else {
        let hidden = match &rest.spans {
            Some(spans) => decoder.hidden_of_spans(rest.ids.clone(), spans, rope),
            None => decoder.causal_hidden(rest.ids.clone(), rope),
        };
        let picks: Vec<(usize, usize)> =
            found.picks.iter().map(|&(k, t)| rest.place(k, t)).collect();
        logprobs_of_hidden(
            decoder,
            hidden,
            &picks,
            &found.targets,
            with_entropy,
            temperature,
        )
    };
    Some((found, got))
}

/// A micro-batch's rows past the prefix they share: laid end to end in one sequence
/// `[1, Σ lengths]` (packed, with each row's length in `spans`), or padded `[rows, longest]`.
struct Rest {
    ids: Tensor<2, Int>,
    spans: Option<Vec<usize>>,
    /// Where each row begins in the packed sequence.
    starts: Vec<usize>,
    shared: usize,
}

impl Rest {
    fn new(rows: &[PolicyRow], group: &[usize], shared: usize, device: &Device) -> Self {
        let tails: Vec<&[u32]> = group.iter().map(|&i| &rows[i].tokens[shared..]).collect();
        if tails.len() < 2 || !packs_rows() {
            let ids = Packed::new(&tails, device).ids;
            return Self {
                ids,
                spans: None,
                starts: Vec::new(),
                shared,
            };
        }
        let spans: Vec<usize> = tails.iter().map(|t| t.len()).collect();
        let starts = spans
            .iter()
            .scan(0, |at, &n| {
                *at += n;
                Some(*at - n)
            })
            .collect();
        Self {
            ids: Packed::new(&[tails.concat().as_slice()], device).ids,
            spans: Some(spans),
            starts,
            shared,
        }
    }

    /// Where position `t` (at least the prefix's length) of the group's row `k` lies in
    /// [`Rest::ids`]: `(row, position)`.
    fn place(&self, k: usize, t: usize) -> (usize, usize) {
        match self.spans {
            Some(_) => (0, self.starts[k] + t - self.shared),
            None => (k, t - self.shared),
        }
    }
}

/// What [`pass`] computes at `found`'s positions from the prefix's final hidden states
/// `[1, shared, width]` and the rows' past it (`rest`'s layout): each distinct
/// (prefix position, target) once — the rows' hidden states there are the prefix's — then
/// handed to every pick of it.
fn within_prefix(
    decoder: &Decoder,
    (prefix, hidden): (Tensor<3>, Tensor<3>),
    found: &Picks,
    rest: &Rest,
    with_entropy: bool,
    temperature: f32,
) -> AtPositions {
    let shared = rest.shared;
    let [batch, len, width] = hidden.dims();
    let mut in_prefix: Vec<usize> = Vec::new();
    let mut prefix_targets: Vec<u32> = Vec::new();
    let mut seen: HashMap<(usize, u32), usize> = HashMap::new();
    let mut in_rest: Vec<usize> = Vec::new();
    let mut rest_targets: Vec<u32> = Vec::new();
    // Per pick: which computed position it reads (prefix ones first, then the rows').
    let mut source: Vec<Result<usize, usize>> = Vec::with_capacity(found.picks.len());
    for (&(k, t), &target) in found.picks.iter().zip(&found.targets) {
        if t < shared {
            let u = *seen.entry((t, target)).or_insert_with(|| {
                in_prefix.push(t);
                prefix_targets.push(target);
                in_prefix.len() - 1
            });
            source.push(Ok(u));
        } else {
            let (row, position) = rest.place(k, t);
            in_rest.push(row * len + position);
            rest_targets.push(target);
            source.push(Err(in_rest.len() - 1));
        }
    }
    let mut chosen = vec![select_rows(prefix.reshape([shared, width]), &in_prefix)];
    if !in_rest.is_empty() {
        chosen.push(select_rows(hidden.reshape([batch * len, width]), &in_rest));
    }
    let targets: Vec<u32> = prefix_targets.into_iter().chain(rest_targets).collect();
    let computed = logprobs_of_chosen(
        decoder,
        Tensor::cat(chosen, 0),
        &targets,
        with_entropy,
        temperature,
    );
    let n = in_prefix.len();
    let index: Vec<usize> = source
        .into_iter()
        .map(|s| s.unwrap_or_else(|r| n + r))
        .collect();
    computed.at(&index)
}

/// Log-probs of every row's tokens `1..` under `decoder` at `temperature`, at the learned
/// positions (0 elsewhere); with `head`, also its values there, aligned to the predicted
/// token (`values[i][t + 1]`). Call it with a decoder without autodiff.
pub(crate) fn score(
    decoder: &Decoder,
    rope: &Rope,
    rows: &[PolicyRow],
    groups: &[Vec<usize>],
    head: Option<&ValueHead>,
    temperature: f32,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let mut out: Vec<Vec<f32>> = rows.iter().map(|r| vec![0.0; r.tokens.len() - 1]).collect();
    let mut values: Vec<Vec<f32>> = rows.iter().map(|r| vec![0.0; r.tokens.len()]).collect();
    let head = head.map(|h| h.valid());
    for group in groups {
        let Some((Picks { at, .. }, got)) = pass(decoder, rope, rows, group, false, temperature)
        else {
            continue;
        };
        for (&(i, t), v) in at.iter().zip(host(got.logprobs)) {
            out[i][t] = v;
        }
        if let Some(head) = &head {
            let v = head.forward(got.hidden.inner());
            for (&(i, t), v) in at.iter().zip(host(v)) {
                values[i][t + 1] = v;
            }
        }
    }
    (out, values)
}

/// A tensor's values on the host.
pub(crate) fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_into_vec::<f32>().expect("f32")
}

/// `[1, n]` of `values`.
pub(crate) fn row_tensor(values: Vec<f32>, device: &Device) -> Tensor<2> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [1, n]), device)
}
