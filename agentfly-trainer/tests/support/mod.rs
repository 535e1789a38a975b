//! What the tests that compare two ways of running the same update share: rows to learn
//! from, the comparison of values, and one scored-and-updated batch with a process-wide
//! switch (`share_prefixes`, `pack_rows`) set one way.

use agentfly_model::Pretrained;
use agentfly_model::model::Decoder;
use agentfly_trainer::train::{
    Actor, OptimConfig, PolicyRow, StepReport, TrainSection, policy_update,
};
use burn::module::Param;
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// A tensor's values.
pub fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// The largest |a − b|.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A row learning from its `mask`ed tokens with `advantage`.
pub fn learning(tokens: Vec<u32>, mask: Vec<f32>, advantage: f32) -> PolicyRow {
    PolicyRow {
        advantages: mask.iter().map(|m| m * advantage).collect(),
        tokens,
        mask,
        ..PolicyRow::default()
    }
}

/// The log-probs of `rows` (micro-batches of 4 096 tokens), then one GRPO update on them
/// from `model`'s weights, with `switch(on)` set for both and set back to its default
/// (on) after.
pub fn scored_and_updated(
    model: &Pretrained,
    rows: &[PolicyRow],
    switch: fn(bool),
    on: bool,
) -> (Vec<Vec<f32>>, StepReport) {
    let optim = OptimConfig {
        lr: 1e-3,
        weight_decay: 0.0,
        ..OptimConfig::default()
    };
    let config = TrainSection {
        track_kl: false,
        ..TrainSection::default()
    };
    switch(on);
    let mut actor = Actor::new(model.decoder.clone(), model.rope.clone(), optim, 10);
    let logprobs = actor.logprobs(rows, 4096);
    let report = policy_update(&mut actor, &mut None, None, rows, &config, 0);
    switch(true);
    (logprobs, report)
}

/// `got`'s gradients of the embedding, the first layer's q/k/v projection and the first
/// and last layers' MLP down projections equal `want`'s, within 1e-4 of their scale, and
/// are not zero.
pub fn assert_same_gradients(decoder: &Decoder, want: &GradientsParams, got: &GradientsParams) {
    let grad =
        |g: &GradientsParams, p: &Param<Tensor<2>>| values(g.get::<2>(p.id).expect("a gradient"));
    let (first, last) = (&decoder.blocks[0], decoder.blocks.last().unwrap());
    for (what, param) in [
        ("embedding", &decoder.embed),
        ("first layer's q/k/v", &first.attention.qkv.weight),
        ("first layer's MLP", &first.mlp.down.weight),
        ("last layer's MLP", &last.mlp.down.weight),
    ] {
        let (a, b) = (grad(want, param), grad(got, param));
        let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let diff = max_diff(&a, &b);
        assert!(scale > 0.0, "{what}: no gradient");
        assert!(
            diff < 1e-4 * scale.max(1.0),
            "{what}: gradients differ by {diff} (largest {scale})"
        );
    }
}
