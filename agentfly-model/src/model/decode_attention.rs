//! Attention of each sequence's new token against its own cached keys and values, for a
//! decode step on the CPU. Burn's flex attention multiplies each (sequence, head) pair with
//! two calls of the gemm crate; at decode's shapes (3 query rows of 64 against a few hundred
//! keys) the calls' set-up outweighs their arithmetic, and at batch 32 those 5 760 calls per
//! step took over a third of the step. Here one task per (sequence, key/value head) walks
//! that row's valid keys once for the query heads sharing them: scores, a softmax and the
//! weighted values, in f32 as before. A Burn backend extension on plain flex (the serving
//! copy never differentiates); [`serves`] says when to call it.

#![allow(unsafe_code)] // Disjoint writes of parallel tasks into the output.

use super::vector::{attention_operands, exp_shifted, zeros};
use burn::backend::flex::{Flex, FlexTensor};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, DispatchDevice, backend_extension};
use burn::tensor::{Device, Shape, Tensor};
use rayon::prelude::*;

/// Whether [`attend`] (and the decode step's rotation, `model::rope`) runs on `device`:
/// the plain flex (CPU) device. Not under autodiff, which a device's `==` ignores: a
/// training pass whose rows are one token long past a shared prefix has a decode step's
/// shapes, and these extensions have no backward pass.
pub fn serves(device: &Device) -> bool {
    matches!(device.as_dispatch(), DispatchDevice::Flex(_))
}

/// Whether every one of `tensors` is on a device that [`serves`]: one operand under
/// autodiff (a training pass's activations, or the rotation tables of a model loaded for
/// training, which a scoring pass without gradients shares) rules these extensions out.
pub fn all_served<const D: usize>(tensors: &[&Tensor<D>]) -> bool {
    tensors.iter().all(|t| serves(&t.device()))
}

/// `softmax(q · kᵀ / √d) · v` over the first `lengths[b]` keys of row `b`: `q`
/// `[batch, kv_heads, group, d]` (the query heads that share a key/value head stacked as
/// rows), `k` and `v` `[batch, kv_heads, capacity, d]`; the result has `q`'s shape.
///
/// # Panics
/// Unless [`serves`] says yes for the tensors' device, or where a length exceeds the
/// capacity or the shapes disagree.
pub fn attend(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, lengths: Vec<usize>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as DecodeAttention>::decode_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        lengths,
    ))
}

/// The extension: one decode step's attention.
#[backend_extension(Flex)]
pub trait DecodeAttention: Backend {
    /// See [`attend`].
    fn decode_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        lengths: Vec<usize>,
    ) -> FloatTensor<Self>;
}

impl DecodeAttention for Flex {
    fn decode_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        lengths: Vec<usize>,
    ) -> FlexTensor {
        let what = "decode attention: q is [batch, kv_heads, group, d]";
        let ([q, k, v], dims, kv) = attention_operands(q, k, v, what);
        let [batch, heads, group, d] = dims;
        assert!(
            kv.len() == 4 && kv[0] == batch && kv[1] == heads && kv[3] == d,
            "decode attention: k is [batch, kv_heads, capacity, d], got {kv:?} for q {dims:?}"
        );
        let capacity = kv[2];
        assert_eq!(lengths.len(), batch, "one length per row");
        assert!(
            group <= MAX_GROUP,
            "decode attention: {group} query heads per key/value head"
        );
        assert!(
            lengths.iter().all(|&l| (1..=capacity).contains(&l)),
            "decode attention: lengths {lengths:?} for a capacity of {capacity}"
        );
        let mut out = zeros(Shape::from(dims.to_vec()));
        let row = Row {
            q: q.storage::<f32>(),
            k: k.storage::<f32>(),
            v: v.storage::<f32>(),
            group,
            d,
            capacity,
        };
        out.storage_mut::<f32>()
            .par_chunks_mut(group * d)
            .enumerate()
            .for_each(|(pair, out)| row.attend(pair, lengths[pair / heads], out));
        out
    }
}

/// Each row of `len` scores in `scores` replaced by `exp(score − the row's max)`, and
/// `inv[g]` set to one over row `g`'s sum: the softmax but for that last scaling.
fn exponentiate(scores: &mut [f32], len: usize, inv: &mut [f32]) {
    for (row, inv) in scores.chunks_exact_mut(len).zip(inv) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        *inv = 1.0 / exp_shifted(row, max);
    }
}

/// Keys prefetched ahead of the one scored.
const PREFETCH_ROWS: usize = 8;

/// The most query heads per key/value head served (SmolLM2: 3, Qwen2.5: up to 7).
const MAX_GROUP: usize = 16;

/// The operands of every (row, key/value head) pair, contiguous.
struct Row<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    group: usize,
    d: usize,
    capacity: usize,
}

impl Row<'_> {
    /// Pair `pair`'s `group` query rows against its first `len` keys, into `out`: with
    /// AVX-512 where the CPU has it (the loops below vectorise 16 wide there, 4 without).
    fn attend(&self, pair: usize, len: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::hardware::avx512() {
            // SAFETY: the CPU has AVX-512F.
            unsafe { self.attend_avx512(pair, len, out) };
            return;
        }
        self.attend_any(pair, len, out);
    }

    /// [`Row::attend`] compiled for AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn attend_avx512(&self, pair: usize, len: usize, out: &mut [f32]) {
        // The shapes of the models served (SmolLM2: 3 query heads a key/value head of 64;
        // Qwen2.5: up to 7 of 64 or 128) with everything in registers; others loop.
        macro_rules! fixed {
            ($($g:literal),*) => {
                match (self.group, self.d) {
                    $(($g, 64) => unsafe { self.attend_fixed::<$g, 4>(pair, len, out) },)*
                    $(($g, 128) => unsafe { self.attend_fixed::<$g, 8>(pair, len, out) },)*
                    _ => self.attend_any(pair, len, out),
                }
            };
        }
        fixed!(1, 2, 3, 4, 5, 6, 7)
    }

    /// [`Row::attend`] for `G` query heads a key/value head of `16 × C` dimensions, in
    /// AVX-512 registers: each key is loaded once for the `G` queries, and each of their
    /// scores summed across the lanes in a few shuffles (a sum in lane order is fifteen
    /// dependent adds); the weighted values accumulate in registers.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `self.group == G` and `self.d == 16 × C`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn attend_fixed<const G: usize, const C: usize>(
        &self,
        pair: usize,
        len: usize,
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let d = 16 * C;
        let scale = 1.0 / (d as f32).sqrt();
        let base = pair * self.capacity * d;
        let keys = &self.k[base..base + len * d];
        let values = &self.v[base..base + len * d];
        let queries = &self.q[pair * G * d..(pair + 1) * G * d];
        assert_eq!(out.len(), G * d);
        // SAFETY (every load and store below): within the slices just bounded.
        let load = |s: &[f32], at: usize| unsafe { _mm512_loadu_ps(s.as_ptr().add(at)) };
        let mut q = [[_mm512_setzero_ps(); C]; G];
        for (g, q) in q.iter_mut().enumerate() {
            for (c, q) in q.iter_mut().enumerate() {
                *q = load(queries, g * d + 16 * c);
            }
        }
        let mut scores = vec![0f32; G * len];
        let ahead = |s: &[f32], at: usize| {
            if at < s.len() {
                // SAFETY: a prefetch of an address within the slice.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().add(at).cast()) };
            }
        };
        for j in 0..len {
            // The keys a few rows on, and this row's values for the second pass: both
            // streams in flight from the start, where the hardware's prefetcher would
            // wait to see each (a few hundred keys are short streams).
            for line in 0..C {
                ahead(keys, (j + PREFETCH_ROWS) * d + 16 * line);
                ahead(values, j * d + 16 * line);
            }
            let k: [__m512; C] = std::array::from_fn(|c| load(keys, j * d + 16 * c));
            for (g, q) in q.iter().enumerate() {
                let mut acc = _mm512_mul_ps(q[0], k[0]);
                for c in 1..C {
                    acc = _mm512_fmadd_ps(q[c], k[c], acc);
                }
                scores[g * len + j] = _mm512_reduce_add_ps(acc) * scale;
            }
        }
        let mut inv = [0f32; G];
        exponentiate(&mut scores, len, &mut inv);
        let mut acc = [[_mm512_setzero_ps(); C]; G];
        for j in 0..len {
            let v: [__m512; C] = std::array::from_fn(|c| load(values, j * d + 16 * c));
            for (g, acc) in acc.iter_mut().enumerate() {
                let p = _mm512_set1_ps(scores[g * len + j]);
                for c in 0..C {
                    acc[c] = _mm512_fmadd_ps(p, v[c], acc[c]);
                }
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            let scale = _mm512_set1_ps(inv[g]);
            for (c, acc) in acc.iter().enumerate() {
                let at = g * d + 16 * c;
                // SAFETY: `out` holds `G × d` values.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(at), _mm512_mul_ps(*acc, scale)) };
            }
        }
    }

    #[inline(always)]
    fn attend_any(&self, pair: usize, len: usize, out: &mut [f32]) {
        let (d, group) = (self.d, self.group);
        let scale = 1.0 / (d as f32).sqrt();
        let base = pair * self.capacity * d;
        let keys = &self.k[base..base + len * d];
        let values = &self.v[base..base + len * d];
        let queries = &self.q[pair * group * d..(pair + 1) * group * d];
        // Each key and each value is read once for all the query rows that share it.
        let mut scores = vec![0f32; group * len];
        for (j, key) in keys.chunks_exact(d).enumerate() {
            for (g, q) in queries.chunks_exact(d).enumerate() {
                scores[g * len + j] = dot(q, key) * scale;
            }
        }
        let mut inv = [0f32; MAX_GROUP];
        exponentiate(&mut scores, len, &mut inv);
        out.fill(0.0);
        for (j, value) in values.chunks_exact(d).enumerate() {
            for (g, o) in out.chunks_exact_mut(d).enumerate() {
                let p = scores[g * len + j];
                for (o, v) in o.iter_mut().zip(value) {
                    *o += p * v;
                }
            }
        }
        for (g, o) in out.chunks_exact_mut(d).enumerate() {
            for o in o.iter_mut() {
                *o *= inv[g];
            }
        }
    }
}

/// `a · b` in sixteen lanes (the compiler vectorises the lanes).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Bool, Distribution, TensorData};

    #[test]
    fn equals_flex_attention_with_the_ragged_mask() {
        // SmolLM2's shape and a Qwen2.5 one (registers, on AVX-512), one that loops.
        crate::model::hardware::on_every_path("decode attention", || {
            for (group, d) in [(3, 64), (7, 128), (2, 32)] {
                equals_flex_attention(group, d);
            }
        });
    }

    fn equals_flex_attention(group: usize, d: usize) {
        let device = Device::flex();
        let (batch, heads, capacity) = (5, 3, 37);
        let lengths = vec![1, 37, 12, 20, 2];
        let q = Tensor::<4>::random(
            [batch, heads, group, d],
            Distribution::Normal(0., 1.),
            &device,
        );
        let k = Tensor::<4>::random(
            [batch, heads, capacity, d],
            Distribution::Normal(0., 1.),
            &device,
        );
        let v = Tensor::<4>::random(
            [batch, heads, capacity, d],
            Distribution::Normal(0., 1.),
            &device,
        );
        let mask: Vec<bool> = lengths
            .iter()
            .flat_map(|&l| (0..heads * group).flat_map(move |_| (0..capacity).map(move |j| j >= l)))
            .collect();
        let mask = Tensor::<4, Bool>::from_data(
            TensorData::new(mask, [batch, heads, group, capacity]),
            &device,
        );
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: false,
        };
        let want = attention(q.clone(), k.clone(), v.clone(), Some(mask), None, options);
        // Strided operands too: keys and values as a narrowed view of a larger buffer.
        let wide = |t: Tensor<4>| Tensor::cat(vec![t.clone(), t], 2).narrow(2, 0, capacity);
        for (k, v) in [(k.clone(), v.clone()), (wide(k), wide(v))] {
            let got = attend(q.clone(), k, v, lengths.clone());
            let (got, want) = (
                got.into_data().try_to_vec::<f32>().unwrap(),
                want.clone().into_data().try_to_vec::<f32>().unwrap(),
            );
            let diff = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-5, "group {group}, d {d}: max |Δ| {diff}");
        }
    }
}
