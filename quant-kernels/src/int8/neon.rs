//! aarch64 integer kernels: `sdot` (the dot-product extension) and plain NEON (`smull` and
//! pairwise adds), each a block at a time. Both are signed times signed, so 8-bit codes are
//! shifted to `q - 128` and `128 · Σx` per lane added back (exact), and E2M1 codes enter as
//! their signed `2·v` (-12..=12) with no offset. 3-, 5- and 6-bit codes come out of the f32
//! kernels' unpacking (`crate::neon::codes`) narrowed to bytes. `sdot` is written as inline
//! assembly: Rust's dot-product intrinsics are not stable.

use std::arch::aarch64::*;

use super::{block_bytes, by_kind, each_row, group_shift, kind, lane_scale, Activations, Isa};
use super::{Row, BLOCK, DIGIT_SHIFT, E2M1, E2M1_TWICE, LANES};
use crate::{Operands, Out, Stored};

/// The sets this CPU has, best first (NEON is part of every aarch64 CPU).
pub(super) fn available() -> Vec<Isa> {
    match std::arch::is_aarch64_feature_detected!("dotprod") {
        true => vec![Isa::NeonDot, Isa::Neon],
        false => vec![Isa::Neon],
    }
}

/// Columns `cols` of `out[m, n]` with `set`.
///
/// # Safety
/// The CPU has `set`; the integer path supports the format; as `int8::columns`.
pub(super) unsafe fn matmul(
    set: Isa,
    ops: &Operands,
    acts: &Activations,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    let walk = (ops, acts, cols, out);
    match set {
        Isa::NeonDot => by_kind!(kind(ops.format), dot::columns(walk)),
        _ => by_kind!(kind(ops.format), plain::columns(walk)),
    }
}

type Walk<'a> = (
    &'a Operands<'a>,
    &'a Activations,
    std::ops::Range<usize>,
    Out,
);

/// One block's 32 codes of `KIND` as signed bytes in lane order, positions 0..16 and 16..32
/// (8-bit codes shifted to `q - 128`, E2M1 codes as `2·v`).
///
/// # Safety
/// NEON; `w` points to the block's [`block_bytes`] packed bytes.
#[inline(always)]
unsafe fn block_codes<const KIND: u32>(w: *const u8) -> [int8x16_t; 2] {
    match KIND {
        4 | E2M1 => {
            let v = vld1q_u8(w);
            let q = [vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v)];
            match KIND {
                E2M1 => {
                    let table = vld1q_s8(E2M1_TWICE.as_ptr());
                    q.map(|q| vqtbl1q_s8(table, q))
                }
                _ => q.map(|q| vreinterpretq_s8_u8(q)),
            }
        }
        2 => {
            let v = vld1_u8(w);
            let three = vdup_n_u8(3);
            let q = [
                vand_u8(v, three),
                vand_u8(vshr_n_u8::<2>(v), three),
                vand_u8(vshr_n_u8::<4>(v), three),
                vshr_n_u8::<6>(v),
            ];
            [
                vreinterpretq_s8_u8(vcombine_u8(q[0], q[1])),
                vreinterpretq_s8_u8(vcombine_u8(q[2], q[3])),
            ]
        }
        3 | 5 | 6 => {
            let c = crate::neon::codes::<KIND>(w);
            let words = |a, b| vcombine_u16(vmovn_u32(a), vmovn_u32(b));
            let bytes = |i: usize| {
                let (low, high) = (words(c[i], c[i + 1]), words(c[i + 2], c[i + 3]));
                vreinterpretq_s8_u8(vcombine_u8(vmovn_u16(low), vmovn_u16(high)))
            };
            [bytes(0), bytes(4)]
        }
        _ => {
            let shift = vdupq_n_u8(0x80);
            [
                vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w), shift)),
                vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w.add(16)), shift)),
            ]
        }
    }
}

/// Block `b`'s combined scales for lanes 0..4 and 4..8, as [`lane_scale`] gives them: one
/// for the block, or (`nvfp4`) its first group's in lanes 0, 1, 4, 5 and its second's in 2,
/// 3, 6, 7.
#[inline(always)]
unsafe fn half_scales<P: Stored>(scales: &[P], shift: u32, x: &Row, b: usize) -> float32x4_t {
    let first = lane_scale(scales, shift, x, b, 0);
    match P::PER_STEP {
        2 => {
            let second = lane_scale(scales, shift, x, b, 2);
            vld1q_f32([first, first, second, second].as_ptr())
        }
        _ => vdupq_n_f32(first),
    }
}

/// The walk over a call's columns and rows with this module's `lanes` as the block kernel.
macro_rules! kernels {
    ($features:literal) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn columns<const KIND: u32>(walk: super::Walk) {
            let ops = walk.0;
            let shift = group_shift(ops.format);
            crate::vector::by_stored!(ops, g => each_row(
                walk,
                (g.scales, g.biases),
                // SAFETY: this function's features are the kernel's.
                |w, x, s| unsafe { row::<KIND, _>(w, x, s, shift) }
            ))
        }

        /// One weight row against one int8 row of x, without the bias part.
        ///
        /// # Safety
        /// The set's features; `w` holds the packed codes of `x.scales.len()` blocks.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn row<const KIND: u32, P: Stored>(
            w: &[u8],
            x: Row,
            scales: &[P],
            shift: u32,
        ) -> f32 {
            let step = block_bytes(KIND);
            let blocks = x.scales.len();
            debug_assert!(w.len() >= blocks * step && x.hi.len() >= blocks * BLOCK);
            let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
            for b in 0..blocks {
                let q = block_codes::<KIND>(w.as_ptr().add(b * step));
                let xs = [x.hi, x.lo].map(|c| c.as_ptr().add(b * BLOCK));
                let c = half_scales(scales, shift, &x, b);
                for h in 0..2 {
                    let hi = lanes(q[h], vld1q_s8(xs[0].add(16 * h)));
                    let lo = lanes(q[h], vld1q_s8(xs[1].add(16 * h)));
                    let mut p = vaddq_s32(vshlq_n_s32::<{ DIGIT_SHIFT as i32 }>(hi), lo);
                    if KIND == 8 {
                        let sums = vld1q_s32(x.lane_sums.as_ptr().add(b * LANES + 4 * h));
                        p = vaddq_s32(p, vshlq_n_s32::<7>(sums));
                    }
                    let a = &mut acc[b % 4][h];
                    *a = vfmaq_f32(*a, vcvtq_f32_s32(p), c);
                }
            }
            reduce(acc)
        }
    };
}

/// The four accumulators (each two halves of 4 lanes) summed as [`super::reduce`] does.
#[inline(always)]
unsafe fn reduce(acc: [[float32x4_t; 2]; 4]) -> f32 {
    let half = |h: usize| {
        vaddq_f32(
            vaddq_f32(acc[0][h], acc[1][h]),
            vaddq_f32(acc[2][h], acc[3][h]),
        )
    };
    let quad = vaddq_f32(half(0), half(1));
    let pair = vadd_f32(vget_low_f32(quad), vget_high_f32(quad));
    vget_lane_f32::<0>(pair) + vget_lane_f32::<1>(pair)
}

mod dot {
    use super::*;

    kernels!("neon,dotprod");

    /// Four lanes, each the sum of 4 adjacent products, in one `sdot`.
    #[target_feature(enable = "neon,dotprod")]
    #[inline]
    unsafe fn lanes(q: int8x16_t, x: int8x16_t) -> int32x4_t {
        let mut acc = vdupq_n_s32(0);
        std::arch::asm!(
            "sdot {acc:v}.4s, {q:v}.16b, {x:v}.16b",
            acc = inout(vreg) acc,
            q = in(vreg) q,
            x = in(vreg) x,
            options(pure, nomem, nostack, preserves_flags)
        );
        acc
    }
}

mod plain {
    use super::*;

    kernels!("neon");

    /// Four lanes, each the sum of 4 adjacent products: `smull` into 16 bits (a product of a
    /// shifted 8-bit code and x fits), then two pairwise adds.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn lanes(q: int8x16_t, x: int8x16_t) -> int32x4_t {
        let low = vpaddlq_s16(vmull_s8(vget_low_s8(q), vget_low_s8(x)));
        let high = vpaddlq_s16(vmull_high_s8(q, x));
        vpaddq_s32(low, high)
    }
}
