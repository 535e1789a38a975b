//! One supervised update (SFT): masked cross-entropy, token-mean over the rows' masked
//! tokens, with exact gradient accumulation over micro-batches and global-norm clipping —
//! skipped, with the reason, when the loss or the gradient is not finite.

use super::actor::Actor;
use super::loss::{LossAggregation, aggregation_weights, sft_loss};
use super::optim::clip_grad_norm;
use super::report::StepReport;
use super::rows::{Picks, PolicyRow, learned_masks, micro_batches_of};
use super::score::{pass, row_tensor};
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};

/// One SFT update of `actor` on `rows` with `optim` (SFT keeps its own optimizer and
/// learning rate) at `lr`. Reports the loss and the gradient norm.
pub fn sft_update(
    actor: &mut Actor,
    rows: &[PolicyRow],
    micro_batch_tokens: usize,
    optim: &mut ModuleOptimizer,
    lr: f64,
) -> StepReport {
    let groups = micro_batches_of(rows, micro_batch_tokens);
    let masks = learned_masks(rows);
    let weights = aggregation_weights(&masks, LossAggregation::TokenMean);
    let decoder = actor.take();
    let device = decoder.embed.val().device();
    let mut accumulator = GradientsAccumulator::new();
    let mut report = StepReport {
        lr,
        tokens: masks.iter().flatten().filter(|&&m| m > 0.0).count(),
        micro_batches: groups.len(),
        ..StepReport::default()
    };
    for group in &groups {
        // Supervised: the model's own distribution (temperature 1).
        let Some((Picks { at, .. }, got)) = pass(&decoder, actor.rope(), rows, group, false, 1.0)
        else {
            continue;
        };
        let w: Vec<f32> = at.iter().map(|&(i, t)| weights[i][t]).collect();
        let loss = sft_loss(got.logprobs.unsqueeze_dim::<2>(0), row_tensor(w, &device));
        report.loss += loss.clone().into_scalar::<f32>();
        accumulator.accumulate(
            &decoder,
            GradientsParams::from_grads(loss.backward(), &decoder),
        );
    }
    let mut grads = accumulator.grads();
    report.grad_norm = clip_grad_norm(&decoder, &mut grads, actor.optim_config.max_grad_norm);
    if report.loss.is_finite() && report.grad_norm.is_finite() {
        actor.apply(decoder, grads, lr, Some(optim));
        report.updates = 1;
    } else {
        report.skipped = Some(format!(
            "non-finite SFT loss {} or gradient norm {}: update skipped, weights unchanged",
            report.loss, report.grad_norm
        ));
        actor.put(decoder);
    }
    report
}
