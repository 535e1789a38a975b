//! Projections in bf16 on Intel AMX ([`super::amx`]): whether a device can run them, and
//! the dithering of f32 master weights that makes bf16 products follow small updates. The
//! products themselves are [`super::matmul`]'s, with its `bf16` flag.

use super::amx;
use burn::tensor::Device;

/// Whether `x · W` on `device` can run in bf16 here: a flex device (with or without
/// autodiff) on a CPU and OS with AMX.
pub fn serves(device: &Device) -> bool {
    super::matmul::serves(device) && amx::available()
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
