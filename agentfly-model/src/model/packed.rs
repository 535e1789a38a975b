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
/// Steps of `k` per block of a panel (`KC × NR` f32, 24 KiB): the block stays in L1 while
/// every tile of rows passes over it, where a whole panel (72–192 KiB) would not.
const KC: usize = 192;

/// The row counts a packed product serves. Larger products (prefill) go to flex, whose
/// blocking wins there. One row is served too since the panels are swept in blocks with
/// the next one prefetched: a batch-1 decode step took 18.7–18.9 ms against 36.9–37.0
/// with flex's products (`decode_batch 1 128`, 2026-12-04), the weights streamed at
/// ~28 GB/s.
pub const PACKED_ROWS: std::ops::RangeInclusive<usize> = 1..=64;

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
        // Every panel's columns are written straight into the output: tiles of
        // different panels write disjoint columns, each `[rows, NR]` with the row stride
        // `n` (a last panel narrower than `NR` goes through a small buffer).
        let mut out = Vec::<f32>::with_capacity(m * n);
        let dst = Dst(out.as_mut_ptr());
        (0..n.div_ceil(NR))
            .into_par_iter()
            .with_min_len(4)
            .for_each(|p| {
                let panel = &panels[p * k * NR..(p + 1) * k * NR];
                // The next panel comes from memory while this one is computed: each tile
                // asks for its share of it ahead of use.
                let next = panels
                    .get((p + 1) * k * NR..(p + 2) * k * NR)
                    .unwrap_or(&[]);
                let tiles = m.div_ceil(MR);
                let blocks = k.div_ceil(KC);
                let share = next.len().div_ceil(tiles * blocks);
                let cols = (n - p * NR).min(NR);
                // A last panel narrower than NR is computed in a buffer, then copied.
                let mut narrow = if cols < NR {
                    vec![0.0f32; m * NR]
                } else {
                    Vec::new()
                };
                // The panel is swept in blocks of KC steps of `k` that stay in L1 while
                // every tile of rows passes over them.
                for b in 0..blocks {
                    for t in 0..tiles {
                        let rows = (m - t * MR).min(MR);
                        let unit = b * tiles + t;
                        let ahead = next.get(unit * share..((unit + 1) * share).min(next.len()));
                        let work = Tile {
                            x: &x[t * MR * k..(t * MR + rows) * k],
                            k,
                            rows,
                            panel,
                            ahead: ahead.unwrap_or(&[]),
                            from: b * KC,
                            to: ((b + 1) * KC).min(k),
                        };
                        let o = if cols == NR {
                            // SAFETY: rows `t·MR ..` and columns `p·NR .. p·NR + NR` lie
                            // inside the `[m, n]` output, and no other task writes them.
                            unsafe { Strided::new(dst.at(t * MR * n + p * NR), n, rows) }
                        } else {
                            Strided::of(&mut narrow[t * MR * NR..(t * MR + rows) * NR], NR, rows)
                        };
                        tile(work, o, fast);
                    }
                }
                for (i, row) in narrow.chunks(NR).enumerate() {
                    // SAFETY: row i's `cols` columns from `p·NR` lie inside the output, and
                    // no other task writes them.
                    unsafe {
                        std::ptr::copy_nonoverlapping(row.as_ptr(), dst.at(i * n + p * NR), cols);
                    }
                }
            });
        // SAFETY: every element was written above: each panel's columns for every row.
        unsafe { out.set_len(m * n) };
        out
    }
}

/// The output's pointer, shared by the tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
struct Dst(*mut f32);
// SAFETY: the tasks write disjoint elements; the vector outlives them.
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Dst {
    /// The `i`th element's address (a method, so closures capture the whole `Dst`).
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// A tile's output: `rows` rows of `NR` values, `stride` apart.
struct Strided<'a> {
    ptr: *mut f32,
    stride: usize,
    rows: usize,
    _out: std::marker::PhantomData<&'a mut f32>,
}

impl<'a> Strided<'a> {
    /// # Safety
    /// `rows` rows of `NR` values at `ptr`, `stride` apart, are writable and written by no
    /// one else while this lives.
    unsafe fn new(ptr: *mut f32, stride: usize, rows: usize) -> Self {
        Self {
            ptr,
            stride,
            rows,
            _out: std::marker::PhantomData,
        }
    }

    fn of(out: &'a mut [f32], stride: usize, rows: usize) -> Self {
        assert!(stride >= NR && out.len() >= (rows - 1) * stride + NR);
        // SAFETY: checked just above; the borrow is held.
        unsafe { Self::new(out.as_mut_ptr(), stride, rows) }
    }

    /// Where row `i`'s `NR` values lie. Until a tile's first block has stored them they
    /// are not initialised: written through this pointer, never read.
    fn row_ptr(&mut self, i: usize) -> *mut f32 {
        assert!(i < self.rows);
        self.ptr.wrapping_add(i * self.stride)
    }

    /// Row `i`'s `NR` values, zeroed first if `zero` (so a slice never shows values not
    /// yet written).
    fn row(&mut self, i: usize, zero: bool) -> &mut [f32] {
        let p = self.row_ptr(i);
        // SAFETY: row i < rows lies in the region `new` was given; its values are written
        // (zeroed here, or stored by an earlier block) before the slice is made.
        unsafe {
            if zero {
                p.write_bytes(0, NR);
            }
            std::slice::from_raw_parts_mut(p, NR)
        }
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
    /// The steps of `k` this call sums, `from .. to`: from step 0 the outputs start at
    /// zero; from a later one, the sums already in the outputs go on.
    from: usize,
    to: usize,
}

/// `out[i] (+)= x[i, from..to] · panel[from..to]` for the tile's rows; `out` is `[rows, NR]`.
fn tile(t: Tile<'_>, mut out: Strided<'_>, fast: bool) {
    let Tile {
        x,
        k,
        rows,
        panel,
        ahead,
        from,
        to,
    } = t;
    assert!(rows <= MR && x.len() == rows * k && panel.len() == k * NR);
    assert!(from < to && to <= k);
    assert_eq!(out.rows, rows);
    #[cfg(target_arch = "x86_64")]
    if fast && super::hardware::avx512() {
        // SAFETY: the CPU has AVX-512F; the lengths were checked above.
        unsafe { tile_avx512(t, out) };
        return;
    }
    let _ = (fast, ahead);
    for i in 0..rows {
        let o = out.row(i, from == 0);
        for (kk, b) in panel.chunks(NR).enumerate().take(to).skip(from) {
            let a = x[i * k + kk];
            for (v, w) in o.iter_mut().zip(b) {
                *v += a * w;
            }
        }
    }
}

/// [`tile`] with AVX-512: each row's 32 sums in two registers, one pass over the block's
/// steps of the panel, and up to two cache lines of `ahead` requested (into L2) per step.
///
/// # Safety
/// The CPU has AVX-512F; the tile's `x` holds `rows × k` values, its `panel` `k × NR`,
/// `from < to ≤ k`, `rows ≤ MR`, and `out` has `rows` rows of `NR` writable values (read
/// only when `from > 0`, after the block before has stored them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(t: Tile<'_>, mut out: Strided<'_>) {
    use std::arch::x86_64::*;
    let Tile {
        x,
        k,
        rows,
        panel,
        ahead,
        from,
        to,
    } = t;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    if from > 0 {
        for (i, a) in acc.iter_mut().enumerate().take(rows) {
            let o = out.row_ptr(i);
            // SAFETY: the row holds NR = 32 values, stored by the block before this one.
            *a = unsafe { [_mm512_loadu_ps(o), _mm512_loadu_ps(o.add(16))] };
        }
    }
    let bp = panel.as_ptr();
    // Each row's start, so that a step's loads share one index (rows past `rows` unused).
    let row: [*const f32; MR] = std::array::from_fn(|i| x[(i % rows) * k..].as_ptr());
    // Cache lines of 16 floats. The first steps ask for `ahead`, one line each, or two
    // where it has more lines than the call has steps; the rest run without. (A whole
    // block's `ahead` has at most `2 · KC` lines; of a short last block's, those past two
    // a step are not asked for.)
    let lines = ahead.len() / 16;
    let two = lines > to - from;
    let fetching = if two { lines.div_ceil(2) } else { lines }.min(to - from);
    let fetch = |line: usize| {
        // A prefetch is only a hint; the caller keeps `line` below `lines`.
        _mm_prefetch::<_MM_HINT_T1>(ahead[16 * line..].as_ptr().cast());
    };
    // One step of `k`: both halves of the panel's row times each row's value.
    macro_rules! step {
        ($rows:expr, $kk:expr) => {{
            let kk = $kk;
            // SAFETY: kk < to ≤ k, so both loads lie in the panel's k × NR values.
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_ps(bp.add(kk * NR)),
                    _mm512_loadu_ps(bp.add(kk * NR + 16)),
                )
            };
            for (a, r) in acc.iter_mut().zip(&row).take($rows) {
                // SAFETY: a row of x holds k values and kk < k.
                let v = _mm512_set1_ps(unsafe { *r.add(kk) });
                a[0] = _mm512_fmadd_ps(v, b0, a[0]);
                a[1] = _mm512_fmadd_ps(v, b1, a[1]);
            }
        }};
    }
    // A constant row count lets the compiler keep every accumulator in a register.
    macro_rules! sweep {
        ($rows:expr) => {{
            if two {
                for j in 0..fetching {
                    fetch(2 * j);
                    if 2 * j + 1 < lines {
                        fetch(2 * j + 1);
                    }
                    step!($rows, from + j);
                }
            } else {
                for j in 0..fetching {
                    fetch(j);
                    step!($rows, from + j);
                }
            }
            for kk in from + fetching..to {
                step!($rows, kk);
            }
        }};
    }
    match rows {
        MR => sweep!(MR),
        1 => sweep!(1),
        r => sweep!(r),
    }
    for (i, a) in acc.iter().enumerate().take(rows) {
        let o = out.row_ptr(i);
        // SAFETY: the row holds NR = 32 values.
        unsafe {
            _mm512_storeu_ps(o, a[0]);
            _mm512_storeu_ps(o.add(16), a[1]);
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
        // Row counts around the tile height, widths around the panel width, depths
        // around the block of `k` (a partial last block, a block of one step).
        for &(m, k, n) in &[
            (1, 5, 3),
            (1, KC + 40, 70),
            (8, 64, 32),
            (9, 33, 65),
            (32, 576, 96),
            (17, 7, 31),
            (20, 2 * KC + 17, 70),
            (3, KC + 1, 32),
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
                    eprintln!(
                        "packed products: NOT RUN HERE: AVX-512 (the portable kernel is checked)"
                    );
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
