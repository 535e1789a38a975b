//! A training or scoring pass over rows that all begin with the same tokens — a batch of
//! trajectories under one system prompt, a group of samples of one question — that runs
//! the common prefix through the network once instead of once per row. Each layer's keys
//! and values of the prefix are broadcast to every row (under autodiff their gradients add
//! up over the rows, as if each row had computed its own copy). The prefix may hold
//! positions the rows learn from (chains that sampled the same first turn): its own
//! hidden states serve them, once for all the rows.

use super::attention::causal_attention;
use super::decoder::positions;
use super::{Decoder, Rope};
use burn::tensor::module::embedding;
use burn::tensor::{Int, Tensor};

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
        self.prefix_and_rows(prefix, rows, rope, false).1
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
        let (prefix, rows) = self.prefix_and_rows(prefix, rows, rope, true);
        (prefix.expect("asked for"), rows)
    }

    /// The pass of both: the prefix's final hidden states only when `prefix_out`.
    fn prefix_and_rows(
        &self,
        prefix: Tensor<2, Int>,
        rows: Tensor<2, Int>,
        rope: &Rope,
        prefix_out: bool,
    ) -> (Option<Tensor<3>>, Tensor<3>) {
        let [_, shared] = prefix.dims();
        let [batch, len] = rows.dims();
        let device = rows.device();
        let (prefix_cos, prefix_sin) = rope.tables(positions(0, shared, 1, &device));
        let (cos, sin) = rope.tables(positions(shared, len, batch, &device));
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
            x = block.feed_forward(x + a.output(causal_attention(q, k, v, group, shared)));
            // The last layer's prefix has given its keys and values; nothing reads on
            // unless the prefix's own outputs are wanted.
            if l < last || prefix_out {
                let attended = causal_attention(prefix_q, prefix_k, prefix_v, group, 0);
                prefix_x = block.feed_forward(prefix_x + a.output(attended));
            }
        }
        (
            prefix_out.then(|| self.norm.forward(prefix_x)),
            self.norm.forward(x),
        )
    }
}
