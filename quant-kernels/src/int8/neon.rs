//! aarch64 integer kernels: `sdot` (the dot-product extension) and plain NEON (`smull` and
//! pairwise adds), each a block at a time. Both are signed times signed, so 8-bit codes are
//! shifted to `q - 128` and `128 · Σx` per lane added back (exact). `sdot` is written as
//! inline assembly: Rust's dot-product intrinsics are not stable.

use std::arch::aarch64::*;

use super::{block_scale, each_row, group_shift, with_affine_params, Activations, Isa, Row};
use super::{BLOCK, DIGIT_SHIFT, LANES};
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
/// The CPU has `set`; the format is affine at 2, 4 or 8 bits; as `int8::columns`.
pub(super) unsafe fn matmul(
    set: Isa,
    ops: &Operands,
    acts: &Activations,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    let walk = (ops, acts, cols, out);
    match (set, ops.format.bits) {
        (Isa::NeonDot, 2) => dot::columns::<2>(walk),
        (Isa::NeonDot, 4) => dot::columns::<4>(walk),
        (Isa::NeonDot, _) => dot::columns::<8>(walk),
        (_, 2) => plain::columns::<2>(walk),
        (_, 4) => plain::columns::<4>(walk),
        _ => plain::columns::<8>(walk),
    }
}

type Walk<'a> = (
    &'a Operands<'a>,
    &'a Activations,
    std::ops::Range<usize>,
    Out,
);

/// One block's 32 codes as signed bytes in lane order, positions 0..16 and 16..32 (8-bit
/// codes shifted to `q - 128`).
///
/// # Safety
/// NEON; `w` points to the block's `4 * BITS` packed bytes.
#[inline(always)]
unsafe fn block_codes<const BITS: u32>(w: *const u8) -> [int8x16_t; 2] {
    match BITS {
        4 => {
            let v = vld1q_u8(w);
            let low = vandq_u8(v, vdupq_n_u8(0x0F));
            [
                vreinterpretq_s8_u8(low),
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)),
            ]
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
        _ => {
            let shift = vdupq_n_u8(0x80);
            [
                vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w), shift)),
                vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w.add(16)), shift)),
            ]
        }
    }
}

/// The walk over a call's columns and rows with this module's `lanes` as the block kernel.
macro_rules! kernels {
    ($features:literal) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn columns<const BITS: u32>(walk: super::Walk) {
            let ops = walk.0;
            let shift = group_shift(ops.format);
            with_affine_params!(ops, |scales, biases| each_row(
                walk,
                (scales, biases),
                // SAFETY: this function's features are the kernel's.
                |w, x, s| unsafe { row::<BITS, _>(w, x, s, shift) }
            ))
        }

        /// One weight row against one int8 row of x, without the bias part.
        ///
        /// # Safety
        /// The set's features; `w` holds the packed codes of `x.scales.len()` blocks.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn row<const BITS: u32, P: Stored>(
            w: &[u8],
            x: Row,
            scales: &[P],
            shift: u32,
        ) -> f32 {
            let step = BLOCK * BITS as usize / 8;
            let blocks = x.scales.len();
            debug_assert!(w.len() >= blocks * step && x.hi.len() >= blocks * BLOCK);
            let mut acc = [[vdupq_n_f32(0.0); 2]; 4];
            for b in 0..blocks {
                let q = block_codes::<BITS>(w.as_ptr().add(b * step));
                let xs = [x.hi, x.lo].map(|c| c.as_ptr().add(b * BLOCK));
                let c = block_scale(scales, shift, &x, b);
                for h in 0..2 {
                    let hi = lanes(q[h], vld1q_s8(xs[0].add(16 * h)));
                    let lo = lanes(q[h], vld1q_s8(xs[1].add(16 * h)));
                    let mut p = vaddq_s32(vshlq_n_s32::<{ DIGIT_SHIFT as i32 }>(hi), lo);
                    if BITS == 8 {
                        let sums = vld1q_s32(x.lane_sums.as_ptr().add(b * LANES + 4 * h));
                        p = vaddq_s32(p, vshlq_n_s32::<7>(sums));
                    }
                    let a = &mut acc[b % 4][h];
                    *a = vfmaq_n_f32(*a, vcvtq_f32_s32(p), c);
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
