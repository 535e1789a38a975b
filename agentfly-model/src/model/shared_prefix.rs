//! A training or scoring pass over rows that all begin with the same tokens — a batch of
//! trajectories under one system prompt, a group of samples of one question — that runs
//! the common prefix through the network once instead of once per row. Each layer's keys
//! and values of the prefix are broadcast to every row (under autodiff their gradients add
//! up over the rows, as if each row had computed its own copy). The prefix may hold
//! positions the rows learn from (chains that sampled the same first turn): its own
//! hidden states serve them, once for all the rows.
//!
//! Rows of different lengths may also be laid end to end in one sequence (`spans`, each
//! row's length) instead of padded to the longest: each row's positions count from its
//! own start (from the prefix's end after a prefix), and its attention sees the prefix and
//! itself alone ([`super::fused_attention::causal_spans`]). No padding is computed.

use super::attention::causal_attention;
use super::decoder::positions;
use super::{Attention, Decoder, Rope, fused_qkv};
use burn::tensor::module::embedding;
use burn::tensor::{Device, Int, Tensor, TensorData};

impl Decoder {
    /// The final hidden states `[batch, len, hidden]` of `rows` `[batch, len]`, each the
    /// continuation of the same `prefix` `[1, prefix_len]`, right-padded as a plain causal
    /// pass wants: what [`Decoder::hidden`] gives at positions `prefix_len..` of the rows
    /// with the prefix written out in each, computed with the prefix's share of the work
    /// done once.
    pub fn hidden_after_prefix(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        rope: &Rope,
    ) -> Tensor<3> {
        self.prefix_and_rows(prefix, rows, None, rope, false).1
    }

    /// [`Decoder::hidden_after_prefix`] of rows laid end to end: `rows` `[1, Σ spans]`
    /// holds rows of `spans` tokens one after the other, each continuing `prefix`; the
    /// result is `[1, Σ spans, hidden]`, each row's hidden states where it lies.
    pub fn hidden_after_prefix_of_spans(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        spans: &[usize],
        rope: &Rope,
    ) -> Tensor<3> {
        self.prefix_and_rows(prefix, rows, Some(spans), rope, false)
            .1
    }

    /// [`Decoder::hidden_of_prefix_and_rows`] of rows laid end to end
    /// ([`Decoder::hidden_after_prefix_of_spans`]).
    pub fn hidden_of_prefix_and_spans(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        spans: &[usize],
        rope: &Rope,
    ) -> (Tensor<3>, Tensor<3>) {
        let (prefix, rows) = self.prefix_and_rows(prefix, rows, Some(spans), rope, true);
        (prefix.expect("asked for"), rows)
    }

    /// The final hidden states `[1, Σ spans, hidden]` of sequences of `spans` tokens laid
    /// end to end in `ids` `[1, Σ spans]`: what [`Decoder::causal_hidden`] gives each
    /// sequence alone, without padding any to the longest.
    pub fn hidden_of_spans(&self, ids: Tensor<2, Int>, spans: &[usize], rope: &Rope) -> Tensor<3> {
        let device = ids.device();
        let (cos, sin) = rope.tables(span_positions(0, spans, &device));
        let mut x = embedding(self.embed.val(), ids);
        for block in &self.blocks {
            let normed = block.input_norm.forward(x.clone());
            let attended = block.attention.of_spans(normed, rope, (&cos, &sin), spans);
            x = block.feed_forward(x + attended);
        }
        self.norm.forward(x)
    }

    /// [`Decoder::hidden_after_prefix`], and the prefix's own final hidden states
    /// `[1, prefix_len, hidden]` (where a row learns from a token of the prefix: every
    /// row's hidden state there is this one).
    pub fn hidden_of_prefix_and_rows(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        rope: &Rope,
    ) -> (Tensor<3>, Tensor<3>) {
        let (prefix, rows) = self.prefix_and_rows(prefix, rows, None, rope, true);
        (prefix.expect("asked for"), rows)
    }

    /// The pass of both: the prefix's final hidden states only when `prefix_out`; the rows
    /// laid end to end when `spans` gives their lengths.
    fn prefix_and_rows(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        spans: Option<&[usize]>,
        rope: &Rope,
        prefix_out: bool,
    ) -> (Option<Tensor<3>>, Tensor<3>) {
        let [_, shared] = prefix.dims();
        let [batch, len] = rows.dims();
        let device = rows.device();
        let (prefix_cos, prefix_sin) = rope.tables(positions(0, shared, 1, &device));
        let (cos, sin) = rope.tables(match spans {
            Some(spans) => span_positions(shared, spans, &device),
            None => positions(shared, len, batch, &device),
        });
        let mut prefix_x = embedding(self.embed.val(), prefix);
        let mut x = embedding(self.embed.val(), rows);
        let last = self.blocks.len().saturating_sub(1);
        for (l, block) in self.blocks.iter().enumerate() {
            let a = &block.attention;
            let group = a.heads / a.kv_heads;
            let normed = block.input_norm.forward(prefix_x.clone());
            let (prefix_q, prefix_k, prefix_v) = a.project(normed, rope, &prefix_cos, &prefix_sin);
            let (q, k, v) = a.project(block.input_norm.forward(x.clone()), rope, &cos, &sin);
            let broadcast = |t: Tensor<4>| {
                let [_, heads, _, width] = t.dims();
                t.expand([batch, heads, shared, width])
            };
            let k = Tensor::cat(vec![broadcast(prefix_k.clone()), k], 2);
            let v = Tensor::cat(vec![broadcast(prefix_v.clone()), v], 2);
            x = block.feed_forward(x + a.output(causal_attention(q, k, v, group, shared, spans)));
            // The last layer's prefix has given its keys and values; nothing reads on
            // unless the prefix's own outputs are wanted.
            if l < last || prefix_out {
                let attended = causal_attention(prefix_q, prefix_k, prefix_v, group, 0, None);
                prefix_x = block.feed_forward(prefix_x + a.output(attended));
            }
        }
        (
            prefix_out.then(|| self.norm.forward(prefix_x)),
            self.norm.forward(x),
        )
    }
}

impl Attention {
    /// The attention of `x` `[1, Σ spans, hidden]`, sequences of `spans` tokens laid end
    /// to end, rotated by `tables` (each sequence's own positions): each sees itself alone.
    fn of_spans(
        &self,
        x: Tensor<3>,
        rope: &Rope,
        (cos, sin): (&Tensor<4>, &Tensor<4>),
        spans: &[usize],
    ) -> Tensor<3> {
        let [batch, len, _] = x.dims();
        if len > 1 && fused_qkv::serves(&x.device()) {
            let table = |t: &Tensor<4>| t.clone().reshape([batch, len, self.head_dim]);
            let qkv = self.qkv.forward(x);
            let (heads, kv) = (self.heads, self.kv_heads);
            let out = fused_qkv::causal_spans(qkv, table(cos), table(sin), heads, kv, spans);
            return self.o.forward(out);
        }
        let (q, k, v) = self.project(x, rope, cos, sin);
        let group = self.heads / self.kv_heads;
        self.output(causal_attention(q, k, v, group, 0, Some(spans)))
    }
}

/// `[1, Σ spans]` rotary positions: `start..start + n` for each run of `n`.
fn span_positions(start: usize, spans: &[usize], device: &Device) -> Tensor<2, Int> {
    let total: usize = spans.iter().sum();
    let positions: Vec<i64> = spans
        .iter()
        .flat_map(|&n| (start..start + n).map(|p| p as i64))
        .collect();
    Tensor::from_data(TensorData::new(positions, [1, total]), device)
}
