//! Projections in bf16 on Intel AMX ([`super::amx`]) as a Burn backend extension: the
//! forward product `x · W` and, under autodiff, the backward pass's `dY · Wᵀ` and `xᵀ · dY`,
//! all three in bf16 with f32 sums (bf16 mixed precision, as PyTorch's CPU autocast does).
//! Only the flex backend (plain or under autodiff) has it; [`serves`] says when to call it.

use super::amx::{self, View};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::{Flex, FlexTensor, Layout};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{DType, Device, Shape, Tensor};

/// Whether `x · W` on `device` can run in bf16 here: a flex device (with or without
/// autodiff) on a CPU and OS with AMX.
pub fn serves(device: &Device) -> bool {
    matches!(
        device.as_dispatch().clone().inner(),
        DispatchDevice::Flex(_)
    ) && amx::available()
}

/// `v` moved by `(u − ½)` of a bf16 step (`u` in [0, 1)): where a bf16 product sees `v`
/// then depends on `u`, not on where `v` sat ([`crate::model::Decoder::dither_for_bf16`]).
/// The move is made on the bit pattern, whose upper 16 bits are the bf16 value, so a step
/// is a step on either side of a power of two. Zero, subnormal and non-finite values stay.
pub fn dither(v: f32, u: f32) -> f32 {
    if !v.is_normal() {
        return v;
    }
    let bits = v.to_bits();
    let magnitude = i64::from(bits & 0x7fff_ffff);
    let offset = ((f64::from(u) - 0.5) * 65536.0).round() as i64;
    // Within the normal, finite numbers.
    let moved = (magnitude + offset).clamp(0x0080_0000, 0x7f7f_ffff) as u32;
    f32::from_bits((bits & 0x8000_0000) | moved)
}

/// A uniform value in [0, 1) for element `index` of `stream` (SplitMix64's finaliser).
pub fn uniform(stream: u64, index: u64) -> f32 {
    let mut z = stream.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 24) as f32
}

/// `x · w` (`x`'s last dimension is `w`'s first) in bf16 with f32 sums.
///
/// # Panics
/// Unless [`serves`] says yes for the tensors' device.
pub fn matmul<const D: usize>(x: Tensor<D>, w: Tensor<2>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as Bf16Products>::bf16_matmul(
        x.into_dispatch(),
        w.into_dispatch(),
    ))
}

/// The extension: one product.
#[backend_extension(Flex, Autodiff)]
pub trait Bf16Products: Backend {
    /// `x · w`: `x` `[..., k]`, `w` `[k, n]`, the result `[..., n]`.
    fn bf16_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl Bf16Products for Flex {
    fn bf16_matmul(x: FlexTensor, w: FlexTensor) -> FlexTensor {
        forward(x, &w).1
    }
}

/// `x · w`, and `x` as the `[rows, k]` matrix the product read (what the backward pass
/// keeps).
fn forward(x: FlexTensor, w: &FlexTensor) -> (FlexTensor, FlexTensor) {
    let dims = x.layout().shape().to_vec();
    let k = *dims.last().expect("x has a last dimension");
    let rows = dims.iter().product::<usize>() / k.max(1);
    let x = rows_of(x, rows, k);
    let n = w.layout().shape()[1];
    let mut out_dims = dims;
    *out_dims.last_mut().expect("x has a last dimension") = n;
    let out = product(&x, false, w, false, Shape::from(out_dims));
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
    assert!(rs >= 0 && cs >= 0, "bf16 products take positive strides");
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
fn product(a: &FlexTensor, a_t: bool, b: &FlexTensor, b_t: bool, shape: Shape) -> FlexTensor {
    let (av, m, k) = view(a, a_t);
    let (bv, k2, n) = view(b, b_t);
    assert_eq!(k, k2, "inner dimensions of a bf16 product");
    let mut out = FlexTensor::empty(shape, DType::F32);
    amx::matmul(av, bv, m, k, n, out.storage_mut::<f32>());
    out
}

#[derive(Debug)]
struct Bf16MatmulBackward;

impl Backward<Flex, 2> for Bf16MatmulBackward {
    /// The forward inputs: `x` as `[rows, k]` and `w`.
    type State = (FlexTensor, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x, w) = ops.state;
        let (rows, k) = (x.layout().shape()[0], x.layout().shape()[1]);
        let n = w.layout().shape()[1];
        let dims = grad.layout().shape().to_vec();
        let grad = rows_of(grad, rows, n);
        if let Some(node) = node_x {
            let mut x_dims = dims;
            *x_dims.last_mut().expect("a last dimension") = k;
            grads.register::<Flex>(
                node.id,
                product(&grad, false, &w, true, Shape::from(x_dims)),
            );
        }
        if let Some(node) = node_w {
            let dw = product(&x, true, &grad, false, Shape::from(vec![k, n]));
            grads.register::<Flex>(node.id, dw);
        }
    }
}

impl<C: CheckpointStrategy> Bf16Products for Autodiff<Flex, C> {
    fn bf16_matmul(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self> {
        match Bf16MatmulBackward
            .prepare::<C>([x.node(), w.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let w = w.primitive().clone();
                let (x, output) = forward(x.primitive().clone(), &w);
                prep.finish((x, w), output)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(Flex::bf16_matmul(x.into_primitive(), w.into_primitive()))
            }
        }
    }
}
