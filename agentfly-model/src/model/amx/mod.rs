//! Matrix products in bf16 on Intel AMX (Advanced Matrix Extensions, Sapphire Rapids and
//! later): `C = A · B` with `A` and `B` rounded to bfloat16 and the sums kept in f32, as
//! PyTorch's CPU autocast and every GPU trainer's bf16 mixed precision do. One AMX tile
//! multiply does 16 × 16 × 32 multiply-adds; on this machine a core sustains ~3.5 TFLOP/s
//! from registers, against ~0.1 TFLOP/s for f32 AVX-512 — the matrix products stop being
//! the bulk of a training step.
//!
//! The inputs are strided f32 (any transpose is a pair of strides) and packed per call:
//! `A` as bf16 rows of `K` padded to 32, `B` in AMX's pair-interleaved ("VNNI") layout in
//! panels of 32 columns. Each task of the thread pool owns a range of 32-row blocks and a
//! range of 32-column panels, and keeps four 16 × 16 f32 accumulator tiles for each
//! 32 × 32 block of `C`.
//!
//! [`available`] asks the kernel for the tile data permission (Linux' `arch_prctl`) once;
//! where the CPU or the OS lacks AMX it answers false and callers keep their f32 products.
#![allow(unsafe_code)] // AMX instructions (inline assembly) and raw writes to disjoint blocks.

mod cpu;
mod pack;
mod view;

use crate::model::vector::Shared;
pub use cpu::available;
use pack::{BLOCK, pack_a, pack_b, round_up};
pub use pack::{from_bf16, to_bf16};
use rayon::prelude::*;
pub use view::View;

/// bf16 values of `K` per tile row (64 bytes).
const TK: usize = 32;
/// 32-row blocks of `A` one task works through per column panel (A's share stays in L2).
const ROW_BLOCKS_PER_TASK: usize = 8;
/// Blocks of partial sums a task keeps (64 × 4 KB, in L2).
const ACC_BLOCKS: usize = 64;
/// Steps of `K` (32 each) per chunk: a panel's chunk is 16 KB.
const K_CHUNK: usize = 8;

/// `C = A · B` (`m × k` times `k × n`) into `c`, row-major `m × n`, in bf16 with f32 sums.
///
/// # Panics
/// If [`available`] is false, or a view or `c` is too short for its shape.
pub fn matmul(a: View<'_>, b: View<'_>, m: usize, k: usize, n: usize, c: &mut [f32]) {
    assert!(available(), "AMX bf16 products need a CPU and OS with AMX");
    assert_eq!(c.len(), m * n, "C is m × n");
    a.check(m, k, "A");
    b.check(k, n, "B");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    let packed_b = PackedB::new(b, k, n);
    run(a, m, &packed_b, c);
}

/// A right operand `B` (`k × n`) packed once for many products ([`matmul_packed`]): a
/// weight that serves many decode steps is converted and laid out once, and each step
/// streams its bf16 panels, half the bytes of the f32 weight.
#[derive(Clone)]
pub struct PackedB {
    k: usize,
    n: usize,
    k_pad: usize,
    data: Vec<u16>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB [{}, {}] bf16", self.k, self.n)
    }
}

impl PackedB {
    /// Packs `b` (`k × n`, any strides) in bf16. Runs anywhere (the packing has a portable
    /// path); only the products need AMX.
    pub fn new(b: View<'_>, k: usize, n: usize) -> Self {
        b.check(k, n, "B");
        let (k_pad, n_pad) = (round_up(k.max(1), TK), round_up(n.max(1), BLOCK));
        Self {
            k,
            n,
            k_pad,
            data: pack_b(b, k, n, k_pad, n_pad),
        }
    }

    /// Rows of `B` (the product's inner width).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of `B` (the product's output width).
    pub fn n(&self) -> usize {
        self.n
    }
}

/// `C = A · B` (`m × k` times the packed `k × n`) into `c`, row-major `m × n`, in bf16
/// with f32 sums: [`matmul`] without packing `B` again.
///
/// # Panics
/// If [`available`] is false, or `a` or `c` is too short for its shape.
pub fn matmul_packed(a: View<'_>, b: &PackedB, m: usize, c: &mut [f32]) {
    assert!(available(), "AMX bf16 products need a CPU and OS with AMX");
    assert_eq!(c.len(), m * b.n, "C is m × n");
    a.check(m, b.k, "A");
    run(a, m, b, c);
}

/// The product of the checked operands.
fn run(a: View<'_>, m: usize, b: &PackedB, c: &mut [f32]) {
    let (k, n) = (b.k, b.n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    let (m_pad, k_pad, n_pad) = (round_up(m, BLOCK), b.k_pad, round_up(n, BLOCK));
    let packed_a = pack_a(a, m, k, m_pad, k_pad);
    let (row_blocks, panels) = (m_pad / BLOCK, n_pad / BLOCK);
    // Tasks: groups of row blocks × groups of panels, enough for every thread.
    let row_groups = row_blocks.div_ceil(ROW_BLOCKS_PER_TASK);
    let threads = rayon::current_num_threads().max(1);
    // At most ACC_BLOCKS blocks of sums per task (they stay in L2 between K's chunks).
    let panels_per_group = (ACC_BLOCKS / ROW_BLOCKS_PER_TASK)
        .min(panels.div_ceil((4 * threads).div_ceil(row_groups)))
        .clamp(1, panels);
    let panel_groups = panels.div_ceil(panels_per_group);
    let job = Job {
        a: &packed_a,
        b: &b.data,
        k_pad,
        m,
        n,
        out: Shared(c.as_mut_ptr()),
    };
    (0..row_groups * panel_groups)
        .into_par_iter()
        .for_each(|task| {
            let (rg, pg) = (task / panel_groups, task % panel_groups);
            let blocks = rg * ROW_BLOCKS_PER_TASK..((rg + 1) * ROW_BLOCKS_PER_TASK).min(row_blocks);
            let cols = pg * panels_per_group..((pg + 1) * panels_per_group).min(panels);
            // SAFETY: AMX is available (asserted by the callers); tasks write disjoint
            // blocks of `c`, which lives until the parallel loop returns.
            unsafe { job.run(blocks, cols) };
        });
}

struct Job<'a> {
    a: &'a [u16],
    b: &'a [u16],
    k_pad: usize,
    m: usize,
    n: usize,
    out: Shared<f32>,
}

/// AMX's tile configuration (palette 1): 64 bytes, tile `t`'s bytes per row at `16 + 2t`,
/// its rows at `48 + t`.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    /// Tiles 0–3 hold 16 × 16 f32 sums, 4–5 16 rows of A's 32 bf16, 6–7 16 pair-rows of B.
    fn new() -> Self {
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        for t in 0..8 {
            cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
            cfg[48 + t] = 16;
        }
        Self(cfg)
    }
}

impl Job<'_> {
    /// Computes the blocks `blocks × panels` of `C`, `K` in chunks of [`K_CHUNK`] so that a
    /// panel's chunk stays in L1 while the row blocks' chunks (in L2) pass it; each block's
    /// partial sums wait in `acc` between chunks.
    ///
    /// # Safety
    /// AMX is available, and no other task writes these blocks.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run(&self, blocks: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
        use std::arch::asm;
        let cfg = TileConfig::new();
        let k_steps = self.k_pad / TK;
        let (row_blocks, cols) = (blocks.len(), panels.len());
        // One row block (decode's few rows) passes each panel once: all of `K` in one
        // chunk streams the panel from memory in order, and the sums stay in tiles.
        let chunk_steps = if row_blocks == 1 { k_steps } else { K_CHUNK };
        let chunks = k_steps.div_ceil(chunk_steps);
        let mut acc = vec![0f32; row_blocks * cols * BLOCK * BLOCK];
        let a_stride = self.k_pad * 2; // bytes between rows of packed A
        let b_stride = 2 * BLOCK * 2; // bytes between pair-rows of a panel
        let st = BLOCK * 4; // bytes between rows of a block's sums
        // SAFETY (all asm below): the configuration is 64 valid bytes; every tile load reads
        // 16 rows of 64 bytes inside the packed buffers (blocks and panels lie inside the
        // padded shapes the buffers were made for, steps inside k_pad); the sums' loads and
        // stores touch 16 rows of 64 bytes inside the block's 32 × 32 values of `acc`.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
            for chunk in 0..chunks {
                let steps = chunk * chunk_steps..((chunk + 1) * chunk_steps).min(k_steps);
                for (p, panel) in panels.clone().enumerate() {
                    let b_panel = self.b.as_ptr().add(panel * self.k_pad * BLOCK);
                    for (r, block) in blocks.clone().enumerate() {
                        let a_rows = self.a.as_ptr().add(block * BLOCK * self.k_pad);
                        let a_lower = a_rows.add(16 * self.k_pad);
                        let s = acc.as_mut_ptr().add((r * cols + p) * BLOCK * BLOCK);
                        let quarters = [s, s.add(16), s.add(16 * BLOCK), s.add(16 * BLOCK + 16)];
                        if chunk == 0 {
                            asm!(
                                "tilezero tmm0",
                                "tilezero tmm1",
                                "tilezero tmm2",
                                "tilezero tmm3",
                                options(nostack, nomem)
                            );
                        } else {
                            asm!(
                                "tileloadd tmm0, [{s0} + {st} * 1]",
                                "tileloadd tmm1, [{s1} + {st} * 1]",
                                "tileloadd tmm2, [{s2} + {st} * 1]",
                                "tileloadd tmm3, [{s3} + {st} * 1]",
                                s0 = in(reg) quarters[0],
                                s1 = in(reg) quarters[1],
                                s2 = in(reg) quarters[2],
                                s3 = in(reg) quarters[3],
                                st = in(reg) st,
                                options(nostack, readonly)
                            );
                        }
                        for step in steps.clone() {
                            let b_step = b_panel.add(step * 16 * 2 * BLOCK);
                            asm!(
                                "tileloadd tmm4, [{a0} + {sa} * 1]",
                                "tileloadd tmm5, [{a1} + {sa} * 1]",
                                "tileloadd tmm6, [{b0} + {sb} * 1]",
                                "tileloadd tmm7, [{b1} + {sb} * 1]",
                                "tdpbf16ps tmm0, tmm4, tmm6",
                                "tdpbf16ps tmm1, tmm4, tmm7",
                                "tdpbf16ps tmm2, tmm5, tmm6",
                                "tdpbf16ps tmm3, tmm5, tmm7",
                                a0 = in(reg) a_rows.add(step * TK),
                                a1 = in(reg) a_lower.add(step * TK),
                                b0 = in(reg) b_step,
                                b1 = in(reg) b_step.add(32),
                                sa = in(reg) a_stride,
                                sb = in(reg) b_stride,
                                options(nostack, readonly)
                            );
                        }
                        asm!(
                            "tilestored [{s0} + {st} * 1], tmm0",
                            "tilestored [{s1} + {st} * 1], tmm1",
                            "tilestored [{s2} + {st} * 1], tmm2",
                            "tilestored [{s3} + {st} * 1], tmm3",
                            s0 = in(reg) quarters[0],
                            s1 = in(reg) quarters[1],
                            s2 = in(reg) quarters[2],
                            s3 = in(reg) quarters[3],
                            st = in(reg) st,
                            options(nostack)
                        );
                    }
                }
            }
            asm!("tilerelease", options(nostack, nomem));
            for (r, block) in blocks.enumerate() {
                for (p, panel) in panels.clone().enumerate() {
                    let at = (r * cols + p) * BLOCK * BLOCK;
                    self.write(block, panel, &acc[at..at + BLOCK * BLOCK]);
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn run(&self, _: std::ops::Range<usize>, _: std::ops::Range<usize>) {
        unreachable!("AMX is x86_64 only, and `available` said no");
    }

    /// Copies a block's sums into `C`, cut to `m × n`.
    ///
    /// # Safety
    /// No other task writes this block.
    unsafe fn write(&self, block: usize, panel: usize, sums: &[f32]) {
        let (row0, col0) = (block * BLOCK, panel * BLOCK);
        let cols = (self.n - col0).min(BLOCK);
        for r in 0..(self.m.saturating_sub(row0)).min(BLOCK) {
            // SAFETY: row0 + r < m and col0 + cols ≤ n: inside C's m × n values.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    sums.as_ptr().add(r * BLOCK),
                    self.out.at((row0 + r) * self.n + col0),
                    cols,
                );
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::packed::tests::values;

    /// `A · B` in f64 from the bf16-rounded inputs: what the kernel computes, up to the
    /// order of its f32 sums.
    fn reference(a: View<'_>, b: View<'_>, m: usize, k: usize, n: usize) -> Vec<f32> {
        let at = |v: View<'_>, i: usize, j: usize| {
            f64::from(from_bf16(to_bf16(
                v.data[v.offset + i * v.row_stride + j * v.col_stride],
            )))
        };
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| at(a, i, l) * at(b, l, j)).sum::<f64>() as f32;
            }
        }
        c
    }

    /// Whether AMX is here; where not, says the test skips (`what` it cannot check), and
    /// fails instead with `AGENTFLY_REQUIRE_AMX=1`.
    pub(in crate::model) fn available_or_skip(what: &str) -> bool {
        if available() {
            return true;
        }
        assert!(
            std::env::var("AGENTFLY_REQUIRE_AMX").as_deref() != Ok("1"),
            "AGENTFLY_REQUIRE_AMX=1 but this CPU or OS has no AMX"
        );
        eprintln!("NOT RUN HERE: AMX (this CPU or OS has none); {what}");
        false
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(from_bf16(to_bf16(1.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        // 1 + 2^-8 lies half way between 1 and 1 + 2^-7: ties go to the even one, 1.
        assert_eq!(from_bf16(to_bf16(1.0 + 1.0 / 256.0)), 1.0);
        assert_eq!(from_bf16(to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
    }

    #[test]
    fn products_equal_the_bf16_reference_at_every_shape_edge_and_transpose() {
        if !available_or_skip("the bf16 kernel cannot run") {
            return;
        }
        for &(m, k, n) in &[
            (1, 1, 1),
            (16, 32, 16),
            (33, 31, 17),
            (32, 64, 32),
            (70, 100, 65),
            (5, 577, 130),
            (300, 96, 40),
        ] {
            let a = values(m * k, (m * 7 + k) as u32);
            let b = values(k * n, (n * 13 + k) as u32);
            let at = transpose(&a, m, k);
            // A plain, B plain; then A given as the transpose of a k × m matrix and B as
            // the transpose of n × k, with an offset, as the backward pass passes them.
            let mut bt = vec![9.0; 3];
            bt.extend(
                (0..n)
                    .flat_map(|j| (0..k).map(move |l| (j, l)))
                    .map(|(j, l)| b[l * n + j]),
            );
            let cases = [
                (View::row_major(&a, k), View::row_major(&b, n)),
                (
                    View::row_major(&at, m).t(),
                    View {
                        data: &bt,
                        offset: 3,
                        row_stride: 1,
                        col_stride: k,
                    },
                ),
            ];
            for (case, (av, bv)) in cases.into_iter().enumerate() {
                let mut c = vec![f32::NAN; m * n];
                matmul(av, bv, m, k, n, &mut c);
                let want = reference(av, bv, m, k, n);
                for (idx, (got, want)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-5 * (k as f32).sqrt() * (1.0 + want.abs()),
                        "{m}×{k}×{n} case {case} at {idx}: {got} against {want}"
                    );
                }
            }
        }
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..cols)
            .flat_map(|j| (0..rows).map(move |i| (i, j)))
            .map(|(i, j)| x[i * cols + j])
            .collect()
    }
}
