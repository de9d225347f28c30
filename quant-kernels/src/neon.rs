//! NEON kernels (aarch64: Linux boxes such as Graviton or Ampere; Apple silicon runs Metal)
//! for every format: the arithmetic of the AVX2 kernels in 4-lane registers. A step's 32
//! codes are unpacked in registers in the lane order of [`super::layout`] (an 8-lane vector
//! there is two registers here), each lane's group sum and accumulator take the same FMAs
//! in the same order, and the 32 lanes are reduced in `scalar::reduce`'s order, so a row has
//! the bits of the portable kernel. NEON and FMA are part of every aarch64 CPU: no detection.

use std::arch::aarch64::*;

use super::float::E2M1;
use super::layout::STEP;
use super::vector::{by_bits, by_stored, each_row_by_steps, Groups};
use super::{Mode, Operands, Out, Stored};

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
    let blocks = scales.len() / P::PER_STEP;
    debug_assert!(w.len() >= blocks * STEPS * step_bytes);
    debug_assert!(x.len() >= blocks * STEPS * STEP);
    let (mut at, mut xs) = (w.as_ptr(), x.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); REGS];
    for s in scales.chunks_exact(P::PER_STEP) {
        let mut p = [vdupq_n_f32(0.0); REGS];
        for _ in 0..STEPS {
            let q = values::<BITS, P>(at);
            for (r, q) in q.into_iter().enumerate() {
                let x = vld1q_f32(xs.add(4 * r));
                p[r] = vfmaq_f32(p[r], q, x);
            }
            at = at.add(step_bytes);
            xs = xs.add(STEP);
        }
        // The layout's vector v is registers 2v and 2v + 1; `nvfp4`'s odd vectors take the
        // block's second group.
        let s = [
            vdupq_n_f32(s[0].widen()),
            vdupq_n_f32(s[P::PER_STEP - 1].widen()),
        ];
        for r in 0..REGS {
            acc[r] = vfmaq_f32(acc[r], s[(r / 2) % 2], p[r]);
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

/// The 32 codes of a step starting at `at` as f32 in lane order: the codes, or their values
/// in a float mode.
///
/// # Safety
/// As `codes`.
#[inline(always)]
unsafe fn values<const BITS: u32, P: Stored>(at: *const u8) -> [float32x4_t; REGS] {
    if P::FLOAT && BITS == 4 {
        // Low nibbles of bytes 0..16 are vectors 0|1, the high ones vectors 2|3.
        let b = vld1q_u8(at);
        let [l0, l1, l2, l3] = e2m1_16(vandq_u8(b, vdupq_n_u8(0xF)));
        let [h0, h1, h2, h3] = e2m1_16(vshrq_n_u8::<4>(b));
        return [l0, l1, l2, l3, h0, h1, h2, h3];
    }
    let q = codes::<BITS>(at);
    let mut v = [vdupq_n_f32(0.0); REGS];
    for (v, q) in v.iter_mut().zip(q) {
        *v = match P::FLOAT {
            true => e4m3(q),
            false => vcvtq_f32_u32(q),
        };
    }
    v
}

/// The E2M1 values of 16 codes (bytes below 16), in order: each value's f32 bits are its top
/// two bytes (the low two are zero), looked up in two tables and interleaved.
#[inline(always)]
unsafe fn e2m1_16(c: uint8x16_t) -> [float32x4_t; 4] {
    const fn byte(i: usize) -> [u8; 16] {
        let mut t = [0u8; 16];
        let mut c = 0;
        while c < 16 {
            t[c] = (E2M1[c].to_bits() >> (8 * i)) as u8;
            c += 1;
        }
        t
    }
    const HIGH: [u8; 16] = byte(3);
    const SECOND: [u8; 16] = byte(2);
    let (high, second) = (
        vqtbl1q_u8(vld1q_u8(HIGH.as_ptr()), c),
        vqtbl1q_u8(vld1q_u8(SECOND.as_ptr()), c),
    );
    // Little-endian halves: the second byte low, the high byte high.
    let lo = vreinterpretq_u16_u8(vzip1q_u8(second, high));
    let hi = vreinterpretq_u16_u8(vzip2q_u8(second, high));
    let bits = |h: uint16x8_t| {
        [
            vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
            vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
        ]
    };
    let ([a, b], [c, d]) = (bits(lo), bits(hi));
    [a, b, c, d]
}

/// E4M3 values of bytes in 32-bit lanes, built in f32 bits as the AVX2 `e4m3`: exponent e > 0
/// is the f32 with exponent `e + 120` and mantissa `m`, e = 0 is `m · 2⁻⁹`; bit 7 the sign.
#[inline(always)]
unsafe fn e4m3(q: uint32x4_t) -> float32x4_t {
    let magnitude = vandq_u32(q, vdupq_n_u32(0x7F));
    let normal = vaddq_u32(vshlq_n_u32::<20>(magnitude), vdupq_n_u32(120 << 23));
    let m = vcvtq_f32_u32(vandq_u32(magnitude, vdupq_n_u32(7)));
    let subnormal = vmulq_n_f32(m, 1.0 / 512.0);
    let is_subnormal = vcltq_u32(magnitude, vdupq_n_u32(8));
    let v = vbslq_f32(is_subnormal, subnormal, vreinterpretq_f32_u32(normal));
    let sign = vshlq_n_u32::<24>(vandq_u32(q, vdupq_n_u32(0x80)));
    vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(v), sign))
}

/// The 32 codes of a step starting at `at`, as integers, in lane order.
///
/// # Safety
/// The step's `4 * BITS` bytes are readable (nothing past them is read).
#[inline(always)]
pub(crate) unsafe fn codes<const BITS: u32>(at: *const u8) -> [uint32x4_t; REGS] {
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

/// Weight row `n` as f32 in natural order (`fma(s, q, b)` per code, or `value(q) · s` in a
/// float mode, as the portable `dequantize_row`), for the panels of a prefill.
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
    let (group, float) = (ops.format.group, ops.format.mode != Mode::Affine);
    for g in 0..ops.k / group {
        let b = biases.map_or(0.0, |b| b.get(g));
        let (s, b) = (vdupq_n_f32(scales.get(g)), vdupq_n_f32(b));
        for k in (g * group..(g + 1) * group).step_by(8) {
            let q = in_order8::<BITS>(row.add(k * BITS as usize / 8));
            for (i, q) in q.into_iter().enumerate() {
                let w = match (float, BITS) {
                    (true, 4) => vmulq_f32(e2m1_4(q), s),
                    (true, _) => vmulq_f32(e4m3(q), s),
                    (false, _) => vfmaq_f32(b, s, vcvtq_f32_u32(q)),
                };
                vst1q_f32(dst.as_mut_ptr().add(k + 4 * i), w);
            }
        }
    }
}

/// E2M1 values of codes in 32-bit lanes, one at a time (the panels' dequantization).
#[inline(always)]
unsafe fn e2m1_4(q: uint32x4_t) -> float32x4_t {
    let mut lanes = [0u32; 4];
    vst1q_u32(lanes.as_mut_ptr(), q);
    let v = lanes.map(crate::float::e2m1);
    vld1q_f32(v.as_ptr())
}
