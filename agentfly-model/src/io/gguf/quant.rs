//! ggml's element types: their block layouts and dequantization to f32, following ggml's
//! reference implementation (`ggml-quants.c`: `dequantize_row_*`).

use half::f16;

/// A ggml element type that agentfly reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit floats.
    F32,
    /// 16-bit floats.
    F16,
    /// bfloat16.
    Bf16,
    /// 4-bit, one scale per 32.
    Q4_0,
    /// 4-bit, a scale and a minimum per 32.
    Q4_1,
    /// 5-bit, one scale per 32.
    Q5_0,
    /// 5-bit, a scale and a minimum per 32.
    Q5_1,
    /// 8-bit, one scale per 32.
    Q8_0,
    /// K-quant, 4-bit in super-blocks of 256 with 6-bit scales and minimums.
    Q4K,
    /// K-quant, 5-bit in super-blocks of 256 with 6-bit scales and minimums.
    Q5K,
    /// K-quant, 6-bit in super-blocks of 256 with 8-bit scales.
    Q6K,
}

/// Values per K-quant super-block.
const QK_K: usize = 256;

impl GgmlType {
    /// The types agentfly reads, for error messages.
    pub const SUPPORTED: &'static str =
        "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K are";

    /// The type of ggml's type id.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::Bf16,
            _ => return None,
        })
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
        }
    }

    /// Values per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::Bf16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
        }
    }

    /// Bytes of `count` values; `None` when they are not a whole number of blocks.
    pub fn byte_size(self, count: u64) -> Option<u64> {
        let block = self.block_len() as u64;
        count
            .is_multiple_of(block)
            .then(|| count / block * self.block_bytes() as u64)
    }

    /// The values of `bytes` (whole blocks of this type).
    pub fn dequantize(self, bytes: &[u8]) -> Vec<f32> {
        let blocks = bytes.chunks_exact(self.block_bytes());
        let mut out = Vec::with_capacity(blocks.len() * self.block_len());
        for b in blocks {
            match self {
                Self::F32 => out.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                Self::F16 => out.push(f16_at(b, 0)),
                Self::Bf16 => out.push(half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
                Self::Q4_0 => q4_0(b, &mut out),
                Self::Q4_1 => q4_1(b, &mut out),
                Self::Q5_0 => q5_0(b, &mut out),
                Self::Q5_1 => q5_1(b, &mut out),
                Self::Q8_0 => {
                    let d = f16_at(b, 0);
                    out.extend(b[2..].iter().map(|&q| d * f32::from(q as i8)));
                }
                Self::Q4K => q4_k(b, &mut out),
                Self::Q5K => q5_k(b, &mut out),
                Self::Q6K => q6_k(b, &mut out),
            }
        }
        out
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// `d, qs[16]`: `(q - 8) · d`, low nibbles first.
fn q4_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    out.extend(qs.iter().map(|&q| (f32::from(q & 0x0f) - 8.0) * d));
    out.extend(qs.iter().map(|&q| (f32::from(q >> 4) - 8.0) * d));
}

/// `d, m, qs[16]`: `q · d + m`.
fn q4_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    out.extend(qs.iter().map(|&q| f32::from(q & 0x0f) * d + m));
    out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
}

/// The 5-bit values of a Q5_0 / Q5_1 block: `qh` (32 high bits) and `qs[16]`.
fn five_bit(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut v = [0u8; 32];
    for j in 0..16 {
        let hi0 = (((qh >> j) << 4) & 0x10) as u8;
        let hi1 = ((qh >> (j + 12)) & 0x10) as u8;
        v[j] = (qs[j] & 0x0f) | hi0;
        v[j + 16] = (qs[j] >> 4) | hi1;
    }
    v
}

/// `d, qh[4], qs[16]`: `(q - 16) · d`.
fn q5_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 0);
    out.extend(
        five_bit(&b[2..6], &b[6..22])
            .iter()
            .map(|&q| (f32::from(q) - 16.0) * d),
    );
}

/// `d, m, qh[4], qs[16]`: `q · d + m`.
fn q5_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    out.extend(
        five_bit(&b[4..8], &b[8..24])
            .iter()
            .map(|&q| f32::from(q) * d + m),
    );
}

/// The `j`-th 6-bit scale and minimum of a K-quant's 12 packed bytes (`get_scale_min_k4`).
fn scale_min(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f32::from(d), f32::from(m))
}

/// `d, dmin, scales[12], qs[128]`: 8 sub-blocks of 32, `d·sc·q − dmin·m`.
fn q4_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for (chunk, q) in b[16..144].chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min(2 * chunk, scales);
        let (sc2, m2) = scale_min(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, min * m1, d * sc2, min * m2);
        out.extend(q.iter().map(|&x| d1 * f32::from(x & 0x0f) - m1));
        out.extend(q.iter().map(|&x| d2 * f32::from(x >> 4) - m2));
    }
}

/// `d, dmin, scales[12], qh[32], qs[128]`: as Q4_K with a fifth bit from `qh`.
fn q5_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    for (chunk, ql) in b[48..176].chunks_exact(32).enumerate() {
        let (u1, u2) = (1u8 << (2 * chunk), 2u8 << (2 * chunk));
        let (sc1, m1) = scale_min(2 * chunk, scales);
        let (sc2, m2) = scale_min(2 * chunk + 1, scales);
        let (d1, m1, d2, m2) = (d * sc1, min * m1, d * sc2, min * m2);
        let high = |h: u8, bit: u8| if h & bit != 0 { 16.0 } else { 0.0 };
        out.extend(
            ql.iter()
                .zip(qh)
                .map(|(&x, &h)| d1 * (f32::from(x & 0x0f) + high(h, u1)) - m1),
        );
        out.extend(
            ql.iter()
                .zip(qh)
                .map(|(&x, &h)| d2 * (f32::from(x >> 4) + high(h, u2)) - m2),
        );
    }
}

/// `ql[128], qh[64], scales[16] (i8), d`: 16 sub-blocks of 16, `d·sc·(q − 32)`.
fn q6_k(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 208);
    let mut y = [0f32; QK_K];
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q = |low: u8, shift: u32| {
                f32::from(((low as i32) | ((((qh[l] >> shift) & 3) as i32) << 4)) as i8 - 32)
            };
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * q(ql[l] & 0x0f, 0);
            y[l + 32] = s(2) * q(ql[l + 32] & 0x0f, 2);
            y[l + 64] = s(4) * q(ql[l] >> 4, 4);
            y[l + 96] = s(6) * q(ql[l + 32] >> 4, 6);
        }
    }
    out.extend_from_slice(&y);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_q8_0_and_q4_0_follow_ggml() {
        let mut q41 = vec![0u8; 20];
        q41[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        q41[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        q41[4] = 0x3a; // lo 10, hi 3
        let v = GgmlType::Q4_1.dequantize(&q41);
        assert_eq!((v[0], v[16], v[1]), (4.0, 0.5, -1.0));
        let mut q80 = vec![0u8; 34];
        q80[0..2].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        q80[2] = (-8i8) as u8;
        q80[3] = 4;
        let v = GgmlType::Q8_0.dequantize(&q80);
        assert_eq!((v[0], v[1], v[2]), (-2.0, 1.0, 0.0));
        let mut q40 = vec![0u8; 18];
        q40[0..2].copy_from_slice(&f16::from_f32(2.0).to_le_bytes());
        q40[2] = 0xf0; // lo 0, hi 15
        let v = GgmlType::Q4_0.dequantize(&q40);
        assert_eq!((v[0], v[16]), (-16.0, 14.0));
    }

    #[test]
    fn sizes_are_whole_blocks() {
        assert_eq!(GgmlType::Q4K.byte_size(512), Some(288));
        assert_eq!(GgmlType::Q6K.byte_size(300), None);
        assert_eq!(GgmlType::F16.byte_size(3), Some(6));
        for id in 0..40 {
            if let Some(t) = GgmlType::from_id(id) {
                let zeros = vec![0u8; t.block_bytes() * 2];
                assert_eq!(
                    t.dequantize(&zeros).len(),
                    2 * t.block_len(),
                    "{}",
                    t.name()
                );
            }
        }
    }
}
