//! NEON kernels (aarch64: Linux boxes such as Graviton or Ampere; Apple silicon runs Metal)
//! for every format: the arithmetic of the AVX2 kernels in 4-lane registers. A step's 32
//! codes are unpacked in registers in the lane order of [`super::layout`] (an 8-lane vector
//! there is two registers here), each lane's group sum and accumulator take the same FMAs
//! in the same order, and the 32 lanes are reduced in `scalar::reduce`'s order, so a row has
//! the bits of the portable kernel. NEON and FMA are part of every aarch64 CPU: no detection.

use std::arch::aarch64::*;

use super::layout::STEP;
use super::vector::{by_bits, by_stored, each_row_by_steps, Groups};
use super::{Operands, Out, Stored};

/// Registers per step (the 32 codes, 4 lanes each).
const REGS: usize = STEP / 4;

/// Columns `cols` of `out[m, n]`, x in lane order.
///
/// # Safety
/// The operands' slices have the sizes `Operands` describes, and as `kernel::columns`.
pub(super) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    debug_assert!(ops.k.is_multiple_of(ops.format.group) && ops.x.len() >= ops.m * ops.k);
    by_stored!(ops, groups => by_bits!(ops.format.bits, columns::<_>(ops, groups, cols, out)))
}

unsafe fn columns<const BITS: u32, P: Stored>(
    ops: &Operands,
    params: Groups<P>,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    // SAFETY: as `matmul`.
    each_row_by_steps!(ops, params, cols, out, row::<BITS, P>)
}

/// One row of x against one weight row without its bias part, as the AVX2 kernel's `row`.
///
/// # Safety
/// `w` holds the codes and `x` the values of `scales.len()` groups of `STEPS` steps.
#[inline(always)]
unsafe fn row<const BITS: u32, const STEPS: usize, P: Stored>(
    w: &[u8],
    x: &[f32],
    scales: &[P],
) -> f32 {
    let step_bytes = STEP * BITS as usize / 8;
    debug_assert!(w.len() >= scales.len() * STEPS * step_bytes);
    debug_assert!(x.len() >= scales.len() * STEPS * STEP);
    let (mut at, mut xs) = (w.as_ptr(), x.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); REGS];
    for s in scales {
        let mut p = [vdupq_n_f32(0.0); REGS];
        for _ in 0..STEPS {
            let q = codes::<BITS>(at);
            for (r, q) in q.into_iter().enumerate() {
                let x = vld1q_f32(xs.add(4 * r));
                p[r] = vfmaq_f32(p[r], vcvtq_f32_u32(q), x);
            }
            at = at.add(step_bytes);
            xs = xs.add(STEP);
        }
        let s = vdupq_n_f32(s.widen());
        for r in 0..REGS {
            acc[r] = vfmaq_f32(acc[r], s, p[r]);
        }
    }
    reduce(acc)
}

/// The accumulators summed in `scalar::reduce`'s order: register 2v holds lanes 0..4 of the
/// layout's vector v, register 2v + 1 its lanes 4..8.
#[inline(always)]
unsafe fn reduce(a: [float32x4_t; REGS]) -> f32 {
    let low = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[4], a[6]));
    let high = vaddq_f32(vaddq_f32(a[1], a[3]), vaddq_f32(a[5], a[7]));
    let quad = vaddq_f32(low, high);
    let pair = vadd_f32(vget_low_f32(quad), vget_high_f32(quad));
    vget_lane_f32::<0>(pair) + vget_lane_f32::<1>(pair)
}

/// The 32 codes of a step starting at `at`, as integers, in lane order.
///
/// # Safety
/// The step's `4 * BITS` bytes are readable (nothing past them is read).
#[inline(always)]
unsafe fn codes<const BITS: u32>(at: *const u8) -> [uint32x4_t; REGS] {
    match BITS {
        8 => {
            let (a, b) = (vld1q_u8(at), vld1q_u8(at.add(16)));
            let [a0, a1, a2, a3] = widen16(a);
            let [b0, b1, b2, b3] = widen16(b);
            [a0, a1, a2, a3, b0, b1, b2, b3]
        }
        4 => {
            // Low nibbles of bytes 0..16 are vectors 0|1, the high ones vectors 2|3.
            let b = vld1q_u8(at);
            let [l0, l1, l2, l3] = widen16(vandq_u8(b, vdupq_n_u8(0xF)));
            let [h0, h1, h2, h3] = widen16(vshrq_n_u8::<4>(b));
            [l0, l1, l2, l3, h0, h1, h2, h3]
        }
        2 => {
            // Vector v takes bits 2v..2v+2 of bytes 0..8.
            let b = vld1_u8(at);
            let two = vdup_n_u8(0x3);
            let [v0, v1] = widen8(vand_u8(b, two));
            let [v2, v3] = widen8(vand_u8(vshr_n_u8::<2>(b), two));
            let [v4, v5] = widen8(vand_u8(vshr_n_u8::<4>(b), two));
            let [v6, v7] = widen8(vshr_n_u8::<6>(b));
            [v0, v1, v2, v3, v4, v5, v6, v7]
        }
        _ => {
            let n = BITS as usize;
            let [a, b] = in_order8::<BITS>(at);
            let [c, d] = in_order8::<BITS>(at.add(n));
            let [e, f] = in_order8::<BITS>(at.add(2 * n));
            let [g, h] = in_order8::<BITS>(at.add(3 * n));
            [a, b, c, d, e, f, g, h]
        }
    }
}

/// 16 bytes zero-extended to four registers of 32-bit lanes, in order.
#[inline(always)]
unsafe fn widen16(b: uint8x16_t) -> [uint32x4_t; 4] {
    let [a, b2] = widen8(vget_low_u8(b));
    let [c, d] = widen8(vget_high_u8(b));
    [a, b2, c, d]
}

/// 8 bytes zero-extended to two registers of 32-bit lanes, in order.
#[inline(always)]
unsafe fn widen8(b: uint8x8_t) -> [uint32x4_t; 2] {
    let h = vmovl_u8(b);
    [vmovl_u16(vget_low_u16(h)), vmovl_high_u16(h)]
}

/// The 8 codes in the `BITS` bytes at `at`, in order, as integers (two registers).
///
/// # Safety
/// `BITS` bytes at `at` are readable (exactly those are read).
#[inline(always)]
unsafe fn in_order8<const BITS: u32>(at: *const u8) -> [uint32x4_t; 2] {
    let mut bytes = [0u8; 8];
    std::ptr::copy_nonoverlapping(at, bytes.as_mut_ptr(), BITS as usize);
    let word = u64::from_le_bytes(bytes);
    // Codes 0..4 lie in the low 4 * BITS bits, codes 4..8 in the next 4 * BITS.
    let (lo, hi) = (word as u32, (word >> (4 * BITS)) as u32);
    let b = BITS as i32;
    // A negative count shifts right.
    let shifts = vld1q_s32([0, -b, -2 * b, -3 * b].as_ptr());
    let mask = vdupq_n_u32((1 << BITS) - 1);
    [
        vandq_u32(vshlq_u32(vdupq_n_u32(lo), shifts), mask),
        vandq_u32(vshlq_u32(vdupq_n_u32(hi), shifts), mask),
    ]
}

/// Weight row `n` as f32 in natural order (`fma(s, q, b)` per code, as the portable
/// `dequantize_row`), for the panels of a prefill.
///
/// # Safety
/// As `matmul`; `dst` holds `ops.k` floats.
pub unsafe fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    by_bits!(ops.format.bits, dequantize(ops, n, dst))
}

unsafe fn dequantize<const BITS: u32>(ops: &Operands, n: usize, dst: &mut [f32]) {
    debug_assert!(dst.len() >= ops.k);
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let group = ops.format.group;
    for g in 0..ops.k / group {
        let (s, b) = (vdupq_n_f32(scales.get(g)), vdupq_n_f32(biases.get(g)));
        for k in (g * group..(g + 1) * group).step_by(8) {
            let q = in_order8::<BITS>(row.add(k * BITS as usize / 8));
            for (i, q) in q.into_iter().enumerate() {
                let w = vfmaq_f32(b, s, vcvtq_f32_u32(q));
                vst1q_f32(dst.as_mut_ptr().add(k + 4 * i), w);
            }
        }
    }
}
