//! Small CPU helpers of the fused operations (`fused_attention`, `swiglu`,
//! [`super::decode_attention`], and the trainer's AdamW): a vectorised
//! `exp`, operands made contiguous, output tensors, and an output buffer shared by the
//! parallel tasks that each write their own part of it.

#![allow(unsafe_code)] // The AVX-512 build of the `exp` loop, called where the CPU has it.

use burn::backend::flex::FlexTensor;
use burn::tensor::{Shape, TensorData};

/// A zeroed, contiguous f32 tensor of `shape`, for an operation's output.
/// `FlexTensor::empty` zeroes a byte buffer and then copies it into a new one to align it
/// (`Bytes::from_bytes_vec`); here the `f32` vector is the tensor's buffer.
pub fn zeros(shape: Shape) -> FlexTensor {
    let n = shape.num_elements();
    FlexTensor::from_data(TensorData::new(vec![0f32; n], shape))
}

/// `t`, or a contiguous copy of it where it is a strided view.
pub(super) fn contiguous(t: FlexTensor) -> FlexTensor {
    if t.is_contiguous() && t.layout().start_offset() == 0 {
        t
    } else {
        t.to_contiguous()
    }
}

/// `x ← exp(x − shift)` for every `x` of `row` (`x − shift` at most ~0); returns the sum.
/// With AVX-512 where the CPU has it.
pub(super) fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::hardware::avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { exp_shifted_avx512(row, shift) };
    }
    exp_shifted_any(row, shift)
}

/// [`exp_shifted`] compiled for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_shifted_avx512(row: &mut [f32], shift: f32) -> f32 {
    exp_shifted_any(row, shift)
}

#[inline(always)]
fn exp_shifted_any(row: &mut [f32], shift: f32) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = row.chunks_exact_mut(16);
    for chunk in &mut chunks {
        for i in 0..16 {
            let e = exp(chunk[i] - shift);
            chunk[i] = e;
            lanes[i] += e;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        *x = exp(*x - shift);
        sum += *x;
    }
    sum
}

/// `eˣ` within ~2 ulp for `x ≤ 88` (below −87 it flushes to ~1e-38), branch-free so that
/// loops over it vectorise: `x = n ln 2 + r`, `eʳ` by Cephes' polynomial, `2ⁿ` from the
/// exponent bits.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 × 2²³: adding it rounds to an integer.
    let x = x.clamp(-87.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 0.166_666_65)
        * r
        + 0.5;
    let y = p * r * r + r + 1.0;
    let bits = (t.to_bits() as i32 - ROUND.to_bits() as i32 + 127) << 23;
    y * f32::from_bits(bits as u32)
}

/// A buffer's pointer, shared by parallel tasks that each write only their own part of it
/// (AMX's product blocks and packed operands, the window attention's output rows).
#[derive(Clone, Copy)]
pub(crate) struct Shared<T>(pub(crate) *mut T);
// SAFETY: every task writes only its own part of the buffer.
unsafe impl<T: Send> Send for Shared<T> {}
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer `offset` values on (a method, so that closures take the whole wrapper).
    ///
    /// # Safety
    /// `offset` lies inside the buffer.
    pub(crate) unsafe fn at(&self, offset: usize) -> *mut T {
        // SAFETY: as the caller promises.
        unsafe { self.0.add(offset) }
    }
}

/// An attention operation's operands made contiguous, with the query's four dimensions and
/// the keys' shape (asserted to be the values'); `what` names the operation and the
/// query's layout in the panics.
pub(crate) fn attention_operands(
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    what: &str,
) -> ([FlexTensor; 3], [usize; 4], Vec<usize>) {
    let (q, k, v) = (contiguous(q), contiguous(k), contiguous(v));
    let dims = q.layout().shape().to_vec();
    let [a, b, c, d] = dims[..] else {
        panic!("{what}, got {dims:?}")
    };
    let kv = k.layout().shape().to_vec();
    assert_eq!(kv, v.layout().shape().to_vec(), "keys and values agree");
    ([q, k, v], [a, b, c, d], kv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_the_standard_library_down_to_the_flush() {
        crate::model::hardware::on_every_path("exp", within_two_ulp);
    }

    fn within_two_ulp() {
        let mut worst = 0f32;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (got, want) = (exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(
            worst < 2.5 * f32::EPSILON,
            "largest relative error {worst:e}"
        );
        let mut row = vec![-1.0, 0.0, 2.0, -100.0];
        let sum = exp_shifted(&mut row, 2.0);
        assert!((row[2] - 1.0).abs() < 1e-7 && row[3] < 1e-37, "{row:?}");
        assert!((sum - row.iter().sum::<f32>()).abs() < 1e-7);
    }
}
