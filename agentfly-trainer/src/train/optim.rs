//! AdamW with PyTorch's defaults, clipping by the global gradient norm, the learning-rate
//! schedule, and a guard that skips a step whose gradients are not finite.

use super::adamw::FusedAdamW;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// The optimizer and its schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Steps of linear warmup from 0.
    pub warmup_steps: usize,
    /// After warmup: `constant`, or `cosine` decay to `min_lr_ratio · lr` at `total_steps`.
    pub schedule: Schedule,
    /// The floor of the cosine schedule, as a fraction of `lr`.
    pub min_lr_ratio: f64,
    /// AdamW β1.
    pub beta1: f32,
    /// AdamW β2.
    pub beta2: f32,
    /// AdamW ε (PyTorch's 1e-8; Burn's default is 1e-5).
    pub eps: f32,
    /// Decoupled weight decay (PyTorch's AdamW default is 0.01).
    pub weight_decay: f32,
    /// Gradients are scaled down so their global L2 norm is at most this (0: no clipping).
    pub max_grad_norm: f32,
}

/// The learning-rate schedule after warmup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// The peak rate throughout.
    #[default]
    Constant,
    /// Half a cosine from the peak to the floor.
    Cosine,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 1e-6,
            warmup_steps: 0,
            schedule: Schedule::Constant,
            min_lr_ratio: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            max_grad_norm: 1.0,
        }
    }
}

impl OptimConfig {
    /// The learning rate of step `step` (0-based) of `total_steps`.
    pub fn lr_at(&self, step: usize, total_steps: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.schedule {
            Schedule::Constant => self.lr,
            Schedule::Cosine => {
                let span = total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
                let floor = self.lr * self.min_lr_ratio;
                floor + (self.lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
            }
        }
    }

    /// A fresh AdamW ([`FusedAdamW`]: Burn's update and state, one pass per parameter on
    /// the CPU).
    pub fn init(&self) -> ModuleOptimizer {
        ModuleOptimizer::from(FusedAdamW::new(
            self.beta1,
            self.beta2,
            self.eps,
            self.weight_decay,
        ))
    }
}

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let sq = g.powi_scalar(2).sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + sq,
                None => sq,
            });
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f32,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            self.grads.register(param.id, g * self.factor);
        }
    }
}

/// The global L2 norm of `grads` over the parameters of `module`.
pub fn grad_norm<M: Module>(module: &M, grads: &GradientsParams) -> f32 {
    let mut visitor = SquaredNorm { grads, total: None };
    module.visit(&mut visitor);
    visitor.total.map_or(0.0, |t| t.into_scalar::<f32>().sqrt())
}

/// Scales `grads` so their global norm is at most `max_norm` (0: unchanged). Returns the
/// norm before clipping; when it is not finite nothing is scaled and the caller must skip
/// the step.
pub fn clip_grad_norm<M: Module>(module: &M, grads: &mut GradientsParams, max_norm: f32) -> f32 {
    let norm = grad_norm(module, grads);
    if norm.is_finite() && max_norm > 0.0 && norm > max_norm {
        let mut visitor = Scale {
            grads,
            factor: max_norm / (norm + 1e-6),
        };
        module.visit(&mut visitor);
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let c = OptimConfig {
            lr: 1.0,
            warmup_steps: 2,
            schedule: Schedule::Cosine,
            min_lr_ratio: 0.1,
            ..OptimConfig::default()
        };
        let lrs: Vec<f64> = (0..7).map(|s| c.lr_at(s, 6)).collect();
        assert_eq!(lrs[0], 0.5);
        assert_eq!(lrs[1], 1.0);
        assert!((lrs[2] - 1.0).abs() < 1e-12, "cosine starts at the peak");
        assert!((lrs[4] - 0.55).abs() < 1e-12, "halfway: (1 + 0.1) / 2");
        assert!((lrs[6] - 0.1).abs() < 1e-12, "ends at the floor");
        let constant = OptimConfig {
            lr: 2.0,
            ..OptimConfig::default()
        };
        assert_eq!(constant.lr_at(100, 10), 2.0);
    }
}
