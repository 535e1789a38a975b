//! Packing for [`super::matmul`]: f32 to bf16, `A` in rows and `B` in AMX's pair-interleaved
//! panels, read along whichever stride is 1.
#![allow(unsafe_code)] // AVX512-BF16 conversion (inline assembly), disjoint parallel writes.

use super::cpu::available;
use super::view::View;
use crate::model::vector::Shared;
use rayon::prelude::*;

/// Rows and columns of a block of `C` (2 × 2 tiles of 16 × 16), and the width of a packed
/// panel of `B`.
pub(super) const BLOCK: usize = 32;

/// f32 → bf16, rounding to nearest even (NaN stays NaN).
#[inline]
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// bf16 → f32 (exact).
#[inline]
pub fn from_bf16(x: u16) -> f32 {
    f32::from_bits(u32::from(x) << 16)
}

/// `dst[i] = to_bf16(src[i])`, 16 at a time with AVX512-BF16's `vcvtneps2bf16` (every
/// AMX CPU has it; the same rounding, NaN kept NaN).
fn convert(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len());
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if available() {
        done = src.len() / 16 * 16;
        // SAFETY: AMX CPUs have AVX-512F and AVX512-BF16 (checked in `detect`).
        unsafe { convert_avx512(&src[..done], &mut dst[..done]) };
    }
    for (o, v) in dst[done..].iter_mut().zip(&src[done..]) {
        *o = to_bf16(*v);
    }
}

/// [`convert`] for whole groups of 16.
///
/// # Safety
/// The CPU has AVX-512F and AVX512-BF16; both lengths are the same multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn convert_avx512(src: &[f32], dst: &mut [u16]) {
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
        // SAFETY: the load reads the 16 f32 of `s`, the store writes the 16 u16 of `d`.
        unsafe {
            std::arch::asm!(
                "vmovups {z}, [{s}]",
                "vcvtneps2bf16 {y}, {z}",
                "vmovdqu [{d}], {y}",
                s = in(reg) s.as_ptr(),
                d = in(reg) d.as_mut_ptr(),
                z = out(zmm_reg) _,
                y = out(ymm_reg) _,
                options(nostack)
            );
        }
    }
    // The compiler does not see the asm's upper register halves: clear them, or every SSE
    // instruction after it (baseline Rust code, flex's element-wise kernels) pays the
    // dirty-upper-state penalty — it had made whole decode steps 2.5× slower.
    // SAFETY: vzeroupper only zeroes the upper halves of vector registers, none of which
    // holds a value here.
    unsafe { std::arch::asm!("vzeroupper", options(nostack, nomem)) };
}

pub(super) fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// `A` (`m × k`) as bf16 rows of `k_pad` values, `m_pad` rows; the padding is zero. Read
/// along whichever of A's strides is 1 (a transposed A is read column by column).
pub(super) fn pack_a(a: View<'_>, m: usize, k: usize, m_pad: usize, k_pad: usize) -> Vec<u16> {
    let mut packed = vec![0u16; m_pad * k_pad];
    if a.row_stride == 1 && a.col_stride != 1 {
        // A transposed (Xᵀ of a weight gradient): A's columns are contiguous. Each task
        // converts 32 of them (32 rows of the stored matrix) and writes them as 32-value
        // pieces of every row of the packed A.
        let out = Shared(packed.as_mut_ptr());
        (0..k.div_ceil(BLOCK)).into_par_iter().for_each(|piece| {
            let j0 = piece * BLOCK;
            let width = (k - j0).min(BLOCK);
            let mut lines = vec![0u16; BLOCK * m];
            for j in 0..width {
                let base = a.offset + (j0 + j) * a.col_stride;
                convert(&a.data[base..base + m], &mut lines[j * m..(j + 1) * m]);
            }
            let mut row = [0u16; BLOCK];
            for i in 0..m {
                for (j, v) in row.iter_mut().take(width).enumerate() {
                    *v = lines[j * m + i];
                }
                // SAFETY: row i's values j0 .. j0 + width lie inside the m_pad × k_pad
                // buffer, and only this task writes columns j0 .. j0 + width.
                unsafe {
                    std::ptr::copy_nonoverlapping(row.as_ptr(), out.at(i * k_pad + j0), width);
                }
            }
        });
        return packed;
    }
    packed
        .par_chunks_mut(k_pad * BLOCK)
        .enumerate()
        .for_each(|(block, rows)| {
            let first = block * BLOCK;
            let count = m.saturating_sub(first).min(BLOCK);
            for (r, row) in rows.chunks_mut(k_pad).take(count).enumerate() {
                let base = a.offset + (first + r) * a.row_stride;
                if a.col_stride == 1 {
                    convert(&a.data[base..base + k], &mut row[..k]);
                } else {
                    for (j, o) in row.iter_mut().take(k).enumerate() {
                        *o = to_bf16(a.data[base + j * a.col_stride]);
                    }
                }
            }
        });
    packed
}

/// `B` (`k × n`) in panels of 32 columns; a panel is `k_pad / 2` rows of 32 pairs
/// `(B[2p][j], B[2p + 1][j])`, the layout an AMX bf16 multiply reads its right operand in.
/// Read along whichever of B's strides is 1.
pub(super) fn pack_b(b: View<'_>, k: usize, n: usize, k_pad: usize, n_pad: usize) -> Vec<u16> {
    let panel_len = k_pad * BLOCK;
    let mut packed = vec![0u16; panel_len * (n_pad / BLOCK)];
    let at = |kk: usize, c: usize| (kk / 2) * 2 * BLOCK + 2 * c + kk % 2;
    if b.col_stride == 1 {
        // Row-major B (the activations' gradient of a weight gradient, or a weight): each
        // task converts 32 whole rows and spreads them over every panel.
        let out = Shared(packed.as_mut_ptr());
        (0..k.div_ceil(BLOCK)).into_par_iter().for_each(|piece| {
            let k0 = piece * BLOCK;
            let rows = (k - k0).min(BLOCK);
            let mut lines = vec![0u16; rows * n];
            for r in 0..rows {
                let base = b.offset + (k0 + r) * b.row_stride;
                convert(&b.data[base..base + n], &mut lines[r * n..(r + 1) * n]);
            }
            let mut pairs = [0u16; BLOCK * 2 * BLOCK];
            for panel in 0..n_pad / BLOCK {
                let first = panel * BLOCK;
                let cols = n.saturating_sub(first).min(BLOCK);
                pairs.fill(0);
                for r in 0..rows {
                    for c in 0..cols {
                        pairs[at(r, c)] = lines[r * n + first + c];
                    }
                }
                // SAFETY: rows k0 .. k0 + 32 of a panel are the panel's pair-rows k0 / 2 ..
                // k0 / 2 + 16: inside the buffer (k_pad ≥ k0 + 32), written by this task only.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        pairs.as_ptr(),
                        out.at(panel * panel_len + at(k0, 0)),
                        rows.div_ceil(2) * 2 * BLOCK,
                    );
                }
            }
        });
        return packed;
    }
    packed
        .par_chunks_mut(panel_len)
        .enumerate()
        .for_each(|(panel, out)| {
            let first = panel * BLOCK;
            let cols = (n - first).min(BLOCK);
            let mut line = vec![0u16; k];
            for c in 0..cols {
                let base = b.offset + (first + c) * b.col_stride;
                if b.row_stride == 1 {
                    convert(&b.data[base..base + k], &mut line);
                    for (kk, v) in line.iter().enumerate() {
                        out[at(kk, c)] = *v;
                    }
                } else {
                    for kk in 0..k {
                        out[at(kk, c)] = to_bf16(b.data[base + kk * b.row_stride]);
                    }
                }
            }
        });
    packed
}
