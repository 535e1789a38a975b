//! The MLP's gating, `silu(gate) · up`, as one CPU operation with its own backward pass: a
//! Burn backend extension on flex (plain and under autodiff) that reads the gate and up
//! halves of the fused `gate_up` product directly. From Burn's operations the same gating
//! is a sigmoid, two products and, under autodiff, about six more elementwise passes over
//! `[tokens, intermediate]` in the backward pass (and their recomputation under gradient
//! checkpointing), each on one thread with a scalar `expf`; here one pass each way, the rows
//! split between the cores, with the vectorised `exp` of [`super::vector`].

#![allow(unsafe_code)] // The AVX-512 builds of the row loops, called where the CPU has it.

use super::vector::{contiguous, exp, zeros};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

pub use super::fused_attention::serves;

/// Rows per parallel task: enough work to outweigh a task's cost at decode's few rows.
const ROWS_PER_TASK: usize = 8;

/// `silu(gate) · up` of `both` `[..., 2 × width]`, whose last dimension holds the gate's
/// `width` values, then the up projection's; the result is `[..., width]`.
///
/// # Panics
/// Unless [`serves`] says yes for the tensor's device.
pub fn swiglu<const D: usize>(both: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedSwiglu>::fused_swiglu(
        both.into_dispatch(),
    ))
}

/// The extension: the gating, differentiable.
#[backend_extension(Flex, Autodiff)]
pub trait FusedSwiglu: Backend {
    /// See [`swiglu`].
    fn fused_swiglu(both: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl FusedSwiglu for Flex {
    fn fused_swiglu(both: FlexTensor) -> FlexTensor {
        forward(&contiguous(both))
    }
}

impl<C: CheckpointStrategy> FusedSwiglu for Autodiff<Flex, C> {
    fn fused_swiglu(both: FloatTensor<Self>) -> FloatTensor<Self> {
        match SwigluBackward
            .prepare::<C>([both.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let both = contiguous(both.primitive().clone());
                let out = forward(&both);
                prep.finish(both, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::fused_swiglu(both.into_primitive())),
        }
    }
}

/// `both`'s shape with the last dimension halved, and that half.
fn halved(both: &FlexTensor) -> (Shape, usize) {
    let mut dims = both.layout().shape().to_vec();
    let last = dims
        .last_mut()
        .expect("swiglu: a tensor with a last dimension");
    assert!(
        last.is_multiple_of(2),
        "swiglu: gate and up halves of {last} values"
    );
    *last /= 2;
    let width = *last;
    (Shape::from(dims), width)
}

fn forward(both: &FlexTensor) -> FlexTensor {
    let (shape, width) = halved(both);
    let mut out = zeros(shape);
    let input = both.storage::<f32>();
    out.storage_mut::<f32>()
        .par_chunks_mut(width * ROWS_PER_TASK)
        .zip(input.par_chunks(2 * width * ROWS_PER_TASK))
        .for_each(|(out, input)| {
            for (out, row) in out
                .chunks_exact_mut(width)
                .zip(input.chunks_exact(2 * width))
            {
                gate(row, out);
            }
        });
    out
}

#[derive(Debug)]
struct SwigluBackward;

impl Backward<Flex, 1> for SwigluBackward {
    /// The input, contiguous.
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = contiguous(grads.consume::<Flex>(&ops.node));
        let Some(node) = node else { return };
        let both = ops.state;
        let (_, width) = halved(&both);
        let mut dboth = zeros(both.layout().shape().clone());
        let (input, grad) = (both.storage::<f32>(), grad.storage::<f32>());
        dboth
            .storage_mut::<f32>()
            .par_chunks_mut(2 * width * ROWS_PER_TASK)
            .zip(input.par_chunks(2 * width * ROWS_PER_TASK))
            .zip(grad.par_chunks(width * ROWS_PER_TASK))
            .for_each(|((dboth, input), grad)| {
                let rows = dboth
                    .chunks_exact_mut(2 * width)
                    .zip(input.chunks_exact(2 * width));
                for ((dboth, row), grad) in rows.zip(grad.chunks_exact(width)) {
                    gate_backward(row, grad, dboth);
                }
            });
        grads.register::<Flex>(node.id, dboth);
    }
}

/// One row: `out = silu(gate) · up`, `row` = gate then up. With AVX-512 where the CPU has
/// it.
fn gate(row: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::hardware::avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { gate_avx512(row, out) };
    }
    gate_any(row, out);
}

/// [`gate`] compiled for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gate_avx512(row: &[f32], out: &mut [f32]) {
    gate_any(row, out);
}

#[inline(always)]
fn gate_any(row: &[f32], out: &mut [f32]) {
    let (g, u) = row.split_at(out.len());
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

/// One row's gradient: `d gate = dy · up · σ(g) (1 + g (1 − σ(g)))`, `d up = dy · silu(g)`.
fn gate_backward(row: &[f32], dy: &[f32], drow: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::hardware::avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { gate_backward_avx512(row, dy, drow) };
    }
    gate_backward_any(row, dy, drow);
}

/// [`gate_backward`] compiled for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gate_backward_avx512(row: &[f32], dy: &[f32], drow: &mut [f32]) {
    gate_backward_any(row, dy, drow);
}

#[inline(always)]
fn gate_backward_any(row: &[f32], dy: &[f32], drow: &mut [f32]) {
    let (g, u) = row.split_at(dy.len());
    let (dg, du) = drow.split_at_mut(dy.len());
    for ((((dg, du), &g), &u), &dy) in dg.iter_mut().zip(du).zip(g).zip(u).zip(dy) {
        let s = 1.0 / (1.0 + exp(-g));
        *dg = dy * u * s * (1.0 + g * (1.0 - s));
        *du = dy * g * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;
    use burn::tensor::Distribution;
    use burn::tensor::activation::silu;

    fn burn_swiglu(both: Tensor<3>) -> Tensor<3> {
        let width = both.dims()[2] / 2;
        silu(both.clone().narrow(2, 0, width)) * both.narrow(2, width, width)
    }

    #[test]
    fn output_and_gradient_equal_burns_operations() {
        crate::model::hardware::on_every_path("SwiGLU", equal_burns_operations);
    }

    fn equal_burns_operations() {
        let device = Device::flex().autodiff();
        // Rows that do not fill the last task; gates far out on both sides of zero.
        let both = (Tensor::<3>::random([3, 7, 2 * 45], Distribution::Normal(0.0, 1.0), &device)
            * 6.0)
            .require_grad();
        let weights = Tensor::<3>::random([3, 7, 45], Distribution::Normal(0.0, 1.0), &device);
        let run = |f: fn(Tensor<3>) -> Tensor<3>| {
            let out = f(both.clone());
            let grads = (out.clone() * weights.clone()).sum().backward();
            (out.inner(), both.grad(&grads).expect("a gradient"))
        };
        let (out, grad) = run(swiglu);
        let (want, want_grad) = run(burn_swiglu);
        for (name, got, want) in [("output", out, want), ("gradient", grad, want_grad)] {
            let scale = want.clone().abs().max().into_scalar::<f32>();
            let diff = (got - want).abs().max().into_scalar::<f32>();
            assert!(
                diff < 1e-5 * scale,
                "{name}: max |Δ| {diff} (scale {scale})"
            );
        }
        // Without autodiff, from a strided view (the transposed batch), the same values.
        let plain = Tensor::<3>::random(
            [4, 5, 2 * 16],
            Distribution::Normal(0.0, 2.0),
            &Device::flex(),
        );
        let strided = plain.clone().swap_dims(0, 1);
        let diff = (swiglu(strided.clone()) - burn_swiglu(strided))
            .abs()
            .max()
            .into_scalar::<f32>();
        assert!(diff < 1e-5, "max |Δ| {diff}");
    }
}
