//! The projections' products `x · W` as a Burn backend extension on flex (plain and under
//! autodiff): in f32 through the gemm crate, or in bf16 with f32 sums on Intel AMX
//! ([`super::amx`], as PyTorch's CPU autocast does). Under autodiff the backward pass's
//! `dY · Wᵀ` and `xᵀ · dY` run the same way. [`serves`] says when to call it.
//!
//! flex's own matmul, which `burn::tensor::module::linear` reaches, multiplies a
//! `[batch, len, k]` input by the weight one batch row at a time, and its backward pass
//! makes a `[batch, k, n]` weight gradient and sums it over the batch; each of its outputs
//! is a zeroed byte buffer copied once more to be realigned (`FlexTensor::empty`, through
//! `Bytes::from_bytes_vec`). Here `x` is one `[rows, k]` matrix, every product is one call,
//! and a product's output is written straight into the tensor's own buffer.

#![allow(unsafe_code)] // The gemm crate's product writes through a raw pointer.

use super::amx::{self, View};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor, Layout};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, backend_extension};
use burn::tensor::{Shape, Tensor, TensorData};

// Whether [`matmul`] runs on a device: a flex (CPU) device, with or without autodiff, as
// for the other CPU operations (bf16 needs AMX as well: [`super::bf16::serves`]).
pub use super::fused_attention::serves;

/// `x · w` (`x`'s last dimension is `w`'s first; `w` may be a strided view such as a
/// transpose), in bf16 with f32 sums when `bf16`, else in f32.
///
/// # Panics
/// Unless [`serves`] says yes for the tensors' device (and [`super::bf16::serves`] for
/// bf16).
pub fn matmul<const D: usize>(x: Tensor<D>, w: Tensor<2>, bf16: bool) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as Products>::projection_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
        bf16,
    ))
}

/// The extension: one product.
#[backend_extension(Flex, Autodiff)]
pub trait Products: Backend {
    /// `x · w`: `x` `[..., k]`, `w` `[k, n]`, the result `[..., n]`; in bf16 if `bf16`.
    fn projection_matmul(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        bf16: bool,
    ) -> FloatTensor<Self>;
}

impl Products for Flex {
    fn projection_matmul(x: FlexTensor, w: FlexTensor, bf16: bool) -> FlexTensor {
        forward(x, &w, bf16).1
    }
}

/// `x · w`, and `x` as the `[rows, k]` matrix the product read (what the backward pass
/// keeps).
fn forward(x: FlexTensor, w: &FlexTensor, bf16: bool) -> (FlexTensor, FlexTensor) {
    let dims = x.layout().shape().to_vec();
    let k = *dims.last().expect("x has a last dimension");
    let rows = dims.iter().product::<usize>() / k.max(1);
    let x = rows_of(x, rows, k);
    let n = w.layout().shape()[1];
    let mut out_dims = dims;
    *out_dims.last_mut().expect("x has a last dimension") = n;
    let out = product(&x, false, w, false, bf16, Shape::from(out_dims));
    (x, out)
}

/// `x` as a `[rows, k]` matrix whose rows are contiguous (copied only where they are not).
fn rows_of(x: FlexTensor, rows: usize, k: usize) -> FlexTensor {
    let x = if x.is_contiguous() {
        x
    } else {
        x.to_contiguous()
    };
    let offset = x.layout().start_offset();
    x.with_layout(Layout::new(
        Shape::from(vec![rows, k]),
        vec![k as isize, 1],
        offset,
    ))
}

/// `t` as a matrix view, transposed if asked, with its rows and columns.
fn view(t: &FlexTensor, transposed: bool) -> (View<'_>, usize, usize) {
    let (rows, cols, rs, cs) = t.layout().as_2d_strides().expect("a 2-D tensor");
    assert!(rs >= 0 && cs >= 0, "products take positive strides");
    let v = View {
        data: t.storage::<f32>(),
        offset: t.layout().start_offset(),
        row_stride: rs as usize,
        col_stride: cs as usize,
    };
    if transposed {
        (v.t(), cols, rows)
    } else {
        (v, rows, cols)
    }
}

/// `op(a) · op(b)` of two 2-D tensors (`op` transposes where asked) into a new tensor of
/// `shape`.
fn product(
    a: &FlexTensor,
    a_t: bool,
    b: &FlexTensor,
    b_t: bool,
    bf16: bool,
    shape: Shape,
) -> FlexTensor {
    let (av, m, k) = view(a, a_t);
    let (bv, k2, n) = view(b, b_t);
    assert_eq!(k, k2, "inner dimensions of a product");
    assert_eq!(shape.num_elements(), m * n, "a product's output shape");
    let out = if bf16 {
        let mut out = vec![0f32; m * n];
        amx::matmul(av, bv, m, k, n, &mut out);
        out
    } else {
        f32_product(av, bv, m, k, n)
    };
    FlexTensor::from_data(TensorData::new(out, shape))
}

/// `a · b` (`m × k` times `k × n`, any strides) in f32, row-major `m × n`, on every core.
fn f32_product(a: View<'_>, b: View<'_>, m: usize, k: usize, n: usize) -> Vec<f32> {
    if k == 0 {
        return vec![0.0; m * n];
    }
    let reaches = |v: &View<'_>, rows: usize, cols: usize| {
        rows == 0
            || cols == 0
            || v.offset + (rows - 1) * v.row_stride + (cols - 1) * v.col_stride < v.data.len()
    };
    assert!(
        reaches(&a, m, k) && reaches(&b, k, n),
        "a view outside its storage"
    );
    let mut out = Vec::<f32>::with_capacity(m * n);
    // SAFETY: both views lie within their storage (checked above); the product writes
    // every one of the `m × n` elements of `out`'s capacity (`read_dst` false: the
    // destination is not read), after which they are initialised.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.data.as_ptr().add(a.offset),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr().add(b.offset),
            b.col_stride as isize,
            b.row_stride as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
        out.set_len(m * n);
    }
    out
}

#[derive(Debug)]
struct MatmulBackward;

impl Backward<Flex, 2> for MatmulBackward {
    /// The forward inputs (`x` as `[rows, k]`, and `w`) and the precision.
    type State = (FlexTensor, FlexTensor, bool);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x, w, bf16) = ops.state;
        let (rows, k) = (x.layout().shape()[0], x.layout().shape()[1]);
        let n = w.layout().shape()[1];
        let dims = grad.layout().shape().to_vec();
        let grad = rows_of(grad, rows, n);
        if let Some(node) = node_x {
            let mut x_dims = dims;
            *x_dims.last_mut().expect("a last dimension") = k;
            let dx = product(&grad, false, &w, true, bf16, Shape::from(x_dims));
            grads.register::<Flex>(node.id, dx);
        }
        if let Some(node) = node_w {
            let dw = product(&x, true, &grad, false, bf16, Shape::from(vec![k, n]));
            grads.register::<Flex>(node.id, dw);
        }
    }
}

impl<C: CheckpointStrategy> Products for Autodiff<Flex, C> {
    fn projection_matmul(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        bf16: bool,
    ) -> FloatTensor<Self> {
        match MatmulBackward
            .prepare::<C>([x.node(), w.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let w = w.primitive().clone();
                let (x, output) = forward(x.primitive().clone(), &w, bf16);
                prep.finish((x, w, bf16), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::projection_matmul(
                x.into_primitive(),
                w.into_primitive(),
                bf16,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, Distribution};

    fn max_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// The f32 product and its two gradients against Burn's `linear` (flex's own matmul
    /// under autodiff), with the weight as stored and as a transposed view (tied logits).
    #[test]
    fn f32_product_and_gradients_equal_burns_linear() {
        let device = Device::flex().autodiff();
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<3>::random([3, 37, 48], normal, &device).require_grad();
        let stored = Tensor::<2>::random([48, 70], normal, &device).require_grad();
        let tied = Tensor::<2>::random([70, 48], normal, &device).require_grad();
        let weights = Tensor::<3>::random([3, 37, 70], normal, &device);
        for (transposed, leaf) in [(false, &stored), (true, &tied)] {
            let run = |ours: bool| {
                // A graph per pass: Burn's backward consumes it.
                let w = if transposed {
                    tied.clone().transpose()
                } else {
                    stored.clone()
                };
                let out = if ours {
                    matmul(x.clone(), w.clone(), false)
                } else {
                    burn::tensor::module::linear(x.clone(), w.clone(), None)
                };
                let grads = (out.clone() * weights.clone()).sum().backward();
                let dx = x.grad(&grads).expect("dx");
                let dw = leaf.grad(&grads).expect("dw");
                (out.inner(), dx, dw)
            };
            let (out, dx, dw) = run(true);
            let (want, want_dx, want_dw) = run(false);
            assert!(max_diff(out, want) < 1e-4);
            assert!(max_diff(dx, want_dx) < 1e-4);
            assert!(max_diff(dw, want_dw) < 1e-3);
        }
    }

    /// Without autodiff, a strided input (a transposed view) is read as what it shows.
    #[test]
    fn without_autodiff_a_strided_input_is_the_same_product() {
        let device = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<2>::random([20, 33], normal, &device);
        let w = Tensor::<2>::random([20, 9], normal, &device);
        let got = matmul(x.clone().transpose(), w.clone(), false);
        let want = x.transpose().matmul(w);
        assert!(max_diff(got, want) < 1e-4);
    }
}
