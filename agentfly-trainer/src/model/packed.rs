//! Weights packed once for decode's matrix products. A decode step multiplies a few rows
//! (one per sequence in the batch) by every weight of the model; flex's products (gemm)
//! repack the weight on every call, which at 32 rows costs more than the arithmetic. Here a
//! weight is laid out once, in panels of 32 columns with each panel's `k × 32` values
//! contiguous, and a small kernel streams each panel once for all rows: AVX-512 where the
//! CPU has it, portable code otherwise (used by the tests; the engine packs only where
//! AVX-512 makes it pay). Results equal flex's to rounding (the sums run in another order).
#![allow(unsafe_code)] // SIMD intrinsics; every pointer access is bounds-checked first.

use super::amx::{self, View};
use rayon::prelude::*;

/// Columns per panel: two AVX-512 registers of f32.
const NR: usize = 32;
/// Rows per tile of the kernel (16 accumulator registers).
const MR: usize = 8;

/// The row counts a packed product serves. Larger products (prefill) go to flex, whose
/// blocking wins there. One row stays on flex too: both stream the weight at one row, and
/// the measurements disagree on which is faster there (the generation bench once gave flex
/// 45 tok/s against 40 packed at batch 1, a later A/B the reverse: this machine's noise),
/// so decode at batch 1 keeps the path it had.
pub const PACKED_ROWS: std::ops::RangeInclusive<usize> = 2..=64;

/// A `[k, n]` weight packed for [`PackedWeight::matmul`]: f32 panels for the AVX-512
/// kernel, or bf16 panels for AMX ([`PackedWeight::bf16_from_in_out`]).
#[derive(Clone)]
pub struct PackedWeight {
    k: usize,
    n: usize,
    panels: Panels,
}

#[derive(Clone)]
enum Panels {
    F32(Vec<f32>),
    Bf16(amx::PackedB),
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_bf16() { "bf16" } else { "f32" };
        write!(f, "PackedWeight [{}, {}] {kind}", self.k, self.n)
    }
}

/// Whether this CPU runs the fast kernel (where packing pays).
pub fn fast_kernel_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl PackedWeight {
    /// Packs `w`, `[k, n]` row-major (a projection's `[in, out]` weight).
    pub fn from_in_out(w: &[f32], k: usize, n: usize) -> Self {
        assert_eq!(w.len(), k * n, "a [{k}, {n}] weight");
        Self::pack(k, n, |row, col| w[row * n + col])
    }

    /// Packs the transpose of `w`, `[n, k]` row-major (a tied embedding `[vocab, hidden]`
    /// as the `[hidden, vocab]` output projection).
    pub fn from_out_in(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), k * n, "a [{n}, {k}] weight");
        Self::pack(k, n, |row, col| w[col * k + row])
    }

    fn pack(k: usize, n: usize, at: impl Fn(usize, usize) -> f32 + Sync) -> Self {
        let mut panels = vec![0.0f32; n.div_ceil(NR) * k * NR];
        panels
            .par_chunks_mut(k * NR)
            .enumerate()
            .for_each(|(p, panel)| {
                let cols = (n - p * NR).min(NR);
                for row in 0..k {
                    for j in 0..cols {
                        panel[row * NR + j] = at(row, p * NR + j);
                    }
                }
            });
        Self {
            k,
            n,
            panels: Panels::F32(panels),
        }
    }

    /// Packs `w`, `[k, n]` row-major, in bf16 for AMX's products ([`amx::matmul_packed`]):
    /// half the bytes to stream per decode step, and AMX's tiles for the arithmetic.
    /// `None` where the CPU or OS has no AMX.
    pub fn bf16_from_in_out(w: &[f32], k: usize, n: usize) -> Option<Self> {
        assert_eq!(w.len(), k * n, "a [{k}, {n}] weight");
        Self::bf16(View::row_major(w, n), k, n)
    }

    /// [`PackedWeight::bf16_from_in_out`] for the transpose of `w`, `[n, k]` row-major.
    pub fn bf16_from_out_in(w: &[f32], n: usize, k: usize) -> Option<Self> {
        assert_eq!(w.len(), k * n, "a [{n}, {k}] weight");
        Self::bf16(View::row_major(w, k).t(), k, n)
    }

    /// [`PackedWeight::bf16_from_in_out`] where `bf16` asks for it and AMX is there,
    /// [`PackedWeight::from_in_out`] otherwise.
    pub fn pack_in_out(w: &[f32], k: usize, n: usize, bf16: bool) -> Self {
        let packed = bf16.then(|| Self::bf16_from_in_out(w, k, n)).flatten();
        packed.unwrap_or_else(|| Self::from_in_out(w, k, n))
    }

    /// [`PackedWeight::pack_in_out`] for the transpose of `w`, `[n, k]` row-major.
    pub fn pack_out_in(w: &[f32], n: usize, k: usize, bf16: bool) -> Self {
        let packed = bf16.then(|| Self::bf16_from_out_in(w, n, k)).flatten();
        packed.unwrap_or_else(|| Self::from_out_in(w, n, k))
    }

    fn bf16(w: View<'_>, k: usize, n: usize) -> Option<Self> {
        amx::available().then(|| Self {
            k,
            n,
            panels: Panels::Bf16(amx::PackedB::new(w, k, n)),
        })
    }

    /// Whether the products run in bf16 on AMX.
    pub fn is_bf16(&self) -> bool {
        matches!(self.panels, Panels::Bf16(_))
    }

    /// Input width.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Output width.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Whether a product with an input of `elements` values (rows × `k`) runs packed:
    /// [`PACKED_ROWS`] in f32; any number of rows in bf16, where AMX's tiles win at every
    /// size and the weight is not packed again per call.
    pub fn serves(&self, elements: usize) -> bool {
        let rows = elements / self.k;
        match self.panels {
            Panels::F32(_) => PACKED_ROWS.contains(&rows),
            Panels::Bf16(_) => rows >= 1,
        }
    }

    /// `x · W` for `x` of `m` rows (`[m, k]` row-major): `[m, n]` row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.matmul_with(x, m, fast_kernel_available())
    }

    fn matmul_with(&self, x: &[f32], m: usize, fast: bool) -> Vec<f32> {
        let (k, n) = (self.k, self.n);
        assert_eq!(x.len(), m * k, "a [{m}, {k}] input");
        let panels = match &self.panels {
            Panels::F32(panels) => panels,
            Panels::Bf16(b) => {
                let mut out = vec![0.0f32; m * n];
                amx::matmul_packed(View::row_major(x, k), b, m, &mut out);
                return out;
            }
        };
        // Each panel's result `[m, NR]`, computed on its own, then put in place.
        let mut by_panel = vec![0.0f32; n.div_ceil(NR) * m * NR];
        by_panel
            .par_chunks_mut(m * NR)
            .with_min_len(4)
            .enumerate()
            .for_each(|(p, out)| {
                let panel = &panels[p * k * NR..(p + 1) * k * NR];
                // The next panel comes from memory while this one is computed: each tile
                // asks for its share of it ahead of use.
                let next = panels
                    .get((p + 1) * k * NR..(p + 2) * k * NR)
                    .unwrap_or(&[]);
                let tiles = m.div_ceil(MR);
                let share = next.len().div_ceil(tiles);
                for (t, rows_out) in out.chunks_mut(MR * NR).enumerate() {
                    let rows = rows_out.len() / NR;
                    let xs = &x[t * MR * k..(t * MR + rows) * k];
                    let ahead = next.get(t * share..((t + 1) * share).min(next.len()));
                    let work = Tile {
                        x: xs,
                        k,
                        rows,
                        panel,
                        ahead: ahead.unwrap_or(&[]),
                    };
                    tile(work, rows_out, fast);
                }
            });
        let mut out = vec![0.0f32; m * n];
        for (p, block) in by_panel.chunks(m * NR).enumerate() {
            let cols = (n - p * NR).min(NR);
            for (i, row) in block.chunks(NR).enumerate() {
                out[i * n + p * NR..i * n + p * NR + cols].copy_from_slice(&row[..cols]);
            }
        }
        out
    }
}

/// One tile's work: `rows` (≤ `MR`) rows of `x` (stride `k`) times a panel, and `ahead`,
/// data needed next, which the fast kernel asks the cache for.
#[derive(Clone, Copy)]
struct Tile<'a> {
    x: &'a [f32],
    k: usize,
    rows: usize,
    panel: &'a [f32],
    ahead: &'a [f32],
}

/// `out[i] = x[i] · panel` for the tile's rows; `out` is `[rows, NR]`.
fn tile(t: Tile<'_>, out: &mut [f32], fast: bool) {
    let Tile {
        x,
        k,
        rows,
        panel,
        ahead,
    } = t;
    assert!(rows <= MR && x.len() == rows * k && panel.len() == k * NR);
    assert_eq!(out.len(), rows * NR);
    #[cfg(target_arch = "x86_64")]
    if fast && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F; the lengths were checked above.
        unsafe { tile_avx512(t, out) };
        return;
    }
    let _ = (fast, ahead);
    for (i, o) in out.chunks_mut(NR).enumerate() {
        o.fill(0.0);
        for (kk, b) in panel.chunks(NR).enumerate() {
            let a = x[i * k + kk];
            for (v, w) in o.iter_mut().zip(b) {
                *v += a * w;
            }
        }
    }
}

/// [`tile`] with AVX-512: each row's 32 sums in two registers, one pass over the panel,
/// and up to two cache lines of `ahead` requested (into L2) per step of `k`.
///
/// # Safety
/// The CPU has AVX-512F; the tile's `x` holds `rows × k` values, its `panel` `k × NR`, `out`
/// `rows × NR`, `rows ≤ MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(t: Tile<'_>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let Tile {
        x,
        k,
        rows,
        panel,
        ahead,
    } = t;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let (xp, bp) = (x.as_ptr(), panel.as_ptr());
    // Cache lines of 16 floats.
    let lines = ahead.len() / 16;
    // A constant row count lets the compiler keep every accumulator in a register.
    macro_rules! sweep {
        ($rows:expr) => {
            for kk in 0..k {
                if 2 * kk < lines {
                    // A prefetch is only a hint; the address lies inside `ahead`.
                    _mm_prefetch::<_MM_HINT_T1>(ahead[32 * kk..].as_ptr().cast());
                    if 2 * kk + 1 < lines {
                        _mm_prefetch::<_MM_HINT_T1>(ahead[32 * kk + 16..].as_ptr().cast());
                    }
                }
                // SAFETY: kk < k, so both loads lie in the panel's k × NR values.
                let (b0, b1) = unsafe {
                    (
                        _mm512_loadu_ps(bp.add(kk * NR)),
                        _mm512_loadu_ps(bp.add(kk * NR + 16)),
                    )
                };
                for (i, a) in acc.iter_mut().enumerate().take($rows) {
                    // SAFETY: i < rows and kk < k: inside x's rows × k values.
                    let v = _mm512_set1_ps(unsafe { *xp.add(i * k + kk) });
                    a[0] = _mm512_fmadd_ps(v, b0, a[0]);
                    a[1] = _mm512_fmadd_ps(v, b1, a[1]);
                }
            }
        };
    }
    match rows {
        MR => sweep!(MR),
        1 => sweep!(1),
        r => sweep!(r),
    }
    for (i, a) in acc.iter().enumerate().take(rows) {
        // SAFETY: i < rows: the row's NR values lie inside out's rows × NR.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr().add(i * NR), a[0]);
            _mm512_storeu_ps(out.as_mut_ptr().add(i * NR + 16), a[1]);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Values in [-1, 1] from a hash of the index (the bf16 kernel's tests use them too).
    pub(in crate::model) fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let h = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn reference(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for kk in 0..k {
                for j in 0..n {
                    out[i * n + j] += x[i * k + kk] as f64 * w[kk * n + j] as f64;
                }
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }

    #[test]
    fn packed_products_equal_the_plain_ones_at_every_shape_edge() {
        // Row counts around the tile height, widths around the panel width.
        for &(m, k, n) in &[
            (1, 5, 3),
            (8, 64, 32),
            (9, 33, 65),
            (32, 576, 96),
            (17, 7, 31),
        ] {
            let (x, w) = (values(m * k, 1), values(k * n, 2));
            let want = reference(&x, &w, m, k, n);
            let transposed: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
            for packed in [
                PackedWeight::from_in_out(&w, k, n),
                PackedWeight::from_out_in(&transposed, n, k),
            ] {
                assert_eq!((packed.k(), packed.n()), (k, n));
                let mut kernels = vec![false];
                if fast_kernel_available() {
                    kernels.push(true);
                } else {
                    eprintln!("no AVX-512 here: only the portable kernel is checked");
                }
                for fast in kernels {
                    let got = packed.matmul_with(&x, m, fast);
                    assert_eq!(got.len(), m * n);
                    for (g, e) in got.iter().zip(&want) {
                        assert!(
                            (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                            "{m}x{k}x{n} {fast}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_packed_products_equal_the_bf16_reference_at_every_shape_edge() {
        if !amx::tests::available_or_skip("bf16 packing cannot serve") {
            assert!(PackedWeight::bf16_from_in_out(&[1.0], 1, 1).is_none());
            return;
        }
        let round = |v: &[f32]| -> Vec<f32> {
            v.iter().map(|&x| amx::from_bf16(amx::to_bf16(x))).collect()
        };
        for &(m, k, n) in &[
            (1, 5, 3),
            (1, 576, 100),
            (8, 64, 32),
            (9, 33, 65),
            (17, 7, 31),
            (32, 576, 96),
            (70, 100, 130),
        ] {
            let (x, w) = (values(m * k, 3), values(k * n, 4));
            let want = reference(&round(&x), &round(&w), m, k, n);
            let transposed: Vec<f32> = (0..n * k).map(|i| w[(i % k) * n + i / k]).collect();
            for packed in [
                PackedWeight::bf16_from_in_out(&w, k, n).unwrap(),
                PackedWeight::bf16_from_out_in(&transposed, n, k).unwrap(),
                PackedWeight::pack_in_out(&w, k, n, true),
                PackedWeight::pack_out_in(&transposed, n, k, true),
            ] {
                assert!(packed.is_bf16() && packed.serves(m * k));
                assert_eq!((packed.k(), packed.n()), (k, n));
                let got = packed.matmul(&x, m);
                for (g, e) in got.iter().zip(&want) {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{m}x{k}x{n}");
                }
            }
        }
        assert!(!PackedWeight::pack_in_out(&[1.0], 1, 1, false).is_bf16());
        assert!(!PackedWeight::pack_out_in(&[1.0], 1, 1, false).is_bf16());
    }
}
