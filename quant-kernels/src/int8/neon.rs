//! aarch64 integer kernels: `smmla` (the 8-bit matrix extension, i8mm: 2 weight rows by 2
//! rows of x), `sdot` (the dot-product extension) and plain NEON (`smull` and pairwise adds),
//! each a block at a time. All are signed times signed, so 8-bit codes are shifted to
//! `q - 128` and `128 · Σx` added back (exact), and E2M1 codes enter as their signed `2·v`
//! (-12..=12) with no offset. 3-, 5- and 6-bit codes come out of the f32 kernels' unpacking
//! (`crate::neon::codes`) narrowed to bytes. `sdot` and `smmla` are written as inline
//! assembly: Rust's intrinsics for them are not stable.

use std::arch::aarch64::*;

use super::{bias_term, block_scale, for_columns, rows_of, Totals, ACCUMULATORS};
use super::{block_bytes, by_kind, each_row, group_shift, kind, Activations, Isa};
use super::{Row, BLOCK, DIGIT_SHIFT, E2M1, E2M1_TWICE, LANES};
use crate::{Operands, Out, Stored};

/// The sets this CPU has, best first (NEON is part of every aarch64 CPU).
pub(super) fn available() -> Vec<Isa> {
    let dot = std::arch::is_aarch64_feature_detected!("dotprod");
    let i8mm = dot && std::arch::is_aarch64_feature_detected!("i8mm");
    [
        (i8mm, Isa::NeonI8mm),
        (dot, Isa::NeonDot),
        (true, Isa::Neon),
    ]
    .into_iter()
    .filter_map(|(has, set)| has.then_some(set))
    .collect()
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
        Isa::NeonI8mm if ops.m >= 2 => by_kind!(kind(ops.format), mmla::columns(walk)),
        Isa::NeonI8mm | Isa::NeonDot => by_kind!(kind(ops.format), dot::columns(walk)),
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

/// [`super::block_scales4`] in registers.
#[inline(always)]
unsafe fn block_scales4<P: Stored>(
    scales: &[P],
    shift: u32,
    x: &Row,
    at: (usize, usize),
) -> [float32x4_t; 2] {
    let [first, second] = super::block_scales4(scales, shift, x, at);
    [vld1q_f32(first.as_ptr()), vld1q_f32(second.as_ptr())]
}

/// 4 blocks' lanes added in pairs (`u[j]`: block `b + j`'s lanes `i` and `i + 4` in lane `i`;
/// a block past the row's end zeros, its scales 0) folded into the four accumulators `acc`
/// (lane `j` accumulator `j`) as [`super::fold`] does, spans of two blocks as
/// [`super::span_totals4`] sums them.
#[inline(always)]
unsafe fn fold4(
    u: [int32x4_t; 4],
    c: [float32x4_t; 2],
    (two_groups, span): (bool, usize),
    acc: float32x4_t,
) -> float32x4_t {
    // [first, second] of blocks 0 and 1, then of 2 and 3.
    let (low, high) = (vpaddq_s32(u[0], u[1]), vpaddq_s32(u[2], u[3]));
    let (first, second) = (vuzp1q_s32(low, high), vuzp2q_s32(low, high));
    match two_groups {
        true => {
            let acc = vfmaq_f32(acc, c[0], vcvtq_f32_s32(first));
            vfmaq_f32(acc, c[1], vcvtq_f32_s32(second))
        }
        false => {
            let t = span_totals4(vaddq_s32(first, second), span);
            vfmaq_f32(acc, c[0], vcvtq_f32_s32(t))
        }
    }
}

/// [`super::span_totals4`] in registers: one `addp` pairs the blocks of each span.
#[inline(always)]
unsafe fn span_totals4(t: int32x4_t, span: usize) -> int32x4_t {
    match span {
        1 => t,
        _ => {
            let spans = vpaddq_s32(t, t);
            debug_assert_eq!(words(spans), super::span_totals4(words(t), span));
            spans
        }
    }
}

/// A vector's four words, for checks.
#[inline(always)]
unsafe fn words(v: int32x4_t) -> [i32; 4] {
    let mut w = [0i32; 4];
    vst1q_s32(w.as_mut_ptr(), v);
    w
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
        /// The set's features; `w` holds the packed codes of `x.blocks` blocks.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn row<const KIND: u32, P: Stored>(
            w: &[u8],
            x: Row,
            scales: &[P],
            shift: u32,
        ) -> f32 {
            let step = block_bytes(KIND);
            let blocks = x.blocks;
            debug_assert!(w.len() >= blocks * step && x.hi.len() >= blocks * BLOCK);
            // Block `b`'s lanes `i` and `i + 4` added, in lane `i`.
            let pairs = |b: usize| {
                let q = block_codes::<KIND>(w.as_ptr().add(b * step));
                let (hi, lo) = (x.hi.as_ptr().add(b * BLOCK), x.lo.as_ptr().add(b * BLOCK));
                let mut p = [vdupq_n_s32(0); 2];
                for h in 0..2 {
                    let high = lanes(q[h], vld1q_s8(hi.add(16 * h)));
                    let low = lanes(q[h], vld1q_s8(lo.add(16 * h)));
                    p[h] = vaddq_s32(vshlq_n_s32::<{ DIGIT_SHIFT as i32 }>(high), low);
                    if KIND == 8 {
                        let sums = vld1q_s32(x.lane_sums.as_ptr().add(b * LANES + 4 * h));
                        p[h] = vaddq_s32(p[h], vshlq_n_s32::<7>(sums));
                    }
                }
                vaddq_s32(p[0], p[1])
            };
            let how = (P::PER_STEP == 2, x.span);
            let mut acc = vdupq_n_f32(0.0);
            for b in (0..blocks / 4 * 4).step_by(4) {
                let u = [pairs(b), pairs(b + 1), pairs(b + 2), pairs(b + 3)];
                let c = block_scales4(scales, shift, &x, (b, blocks));
                acc = fold4(u, c, how, acc);
            }
            let from = blocks / 4 * 4;
            if from < blocks {
                let zero = vdupq_n_s32(0);
                let u = [
                    pairs(from),
                    if from + 1 < blocks { pairs(from + 1) } else { zero },
                    if from + 2 < blocks { pairs(from + 2) } else { zero },
                    zero,
                ];
                let c = block_scales4(scales, shift, &x, (from, blocks));
                acc = fold4(u, c, how, acc);
            }
            reduce(acc)
        }
    };
}

/// The four accumulators (lane `j` accumulator `j`) summed as [`super::reduce`] does.
#[inline(always)]
unsafe fn reduce(acc: float32x4_t) -> f32 {
    let mut a = [0f32; 4];
    vst1q_f32(a.as_mut_ptr(), acc);
    super::reduce(a)
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

/// 2 weight rows by 2 rows of x a block: `smmla` multiplies 8 codes of each weight row by 8
/// digits of each row of x into the 4 totals `[(n0, m0), (n0, m1), (n1, m0), (n1, m1)]`, so
/// each weight row's codes are unpacked once for two rows of x and each instruction does 32
/// multiply-adds (`sdot`: 16). The float steps are the module's, one output a lane.
mod mmla {
    use super::*;

    /// Columns `walk.2`, weight rows and rows of x in pairs (a last odd one paired with
    /// itself, its copy never written).
    #[target_feature(enable = "neon,i8mm")]
    pub(super) unsafe fn columns<const KIND: u32>(walk: super::Walk) {
        let ops = walk.0;
        crate::vector::by_stored!(ops, g => {
            // SAFETY: this function's features are the kernel's.
            unsafe { pairs::<KIND, _>(walk, (g.scales, g.biases)) }
        })
    }

    /// A weight row: its index, codes, scales and biases (`None` for the float modes).
    type Weight<'a, P> = (usize, &'a [u8], &'a [P], Option<&'a [P]>);

    /// Each pair of weight rows against each pair of rows of x.
    #[target_feature(enable = "neon,i8mm")]
    unsafe fn pairs<const KIND: u32, P: Stored>(
        (ops, acts, cols, out): super::Walk,
        params: (&[P], &[P]),
    ) {
        let rows = rows_of(ops, acts);
        let shift = group_shift(ops.format);
        let mut weights: Vec<Weight<P>> = Vec::with_capacity(2);
        for_columns(ops, cols.clone(), params, |n, w, s, b| {
            weights.push((n, w, s, b));
            if weights.len() < 2 && n + 1 < cols.end {
                return;
            }
            let pair = [weights[0], weights[weights.len() - 1]];
            for m0 in (0..ops.m).step_by(2) {
                let m1 = (m0 + 1).min(ops.m - 1);
                let x = [rows[m0].0, rows[m1].0];
                let v = quad::<KIND, P>([pair[0].1, pair[1].1], [pair[0].2, pair[1].2], x, shift);
                // SAFETY: the caller was given an output of `m * n` values.
                unsafe { write(v, pair, [(m0, rows[m0].1), (m1, rows[m1].1)], (out, ops.n)) };
            }
            weights.clear();
        })
    }

    /// Outputs `v` of weight rows `w` and rows of x `x` (with their groups' sums of x), the
    /// bias part added; a pair's second member that is its first again is not written.
    ///
    /// # Safety
    /// `out` holds the rows of x by `n` outputs, and no other thread writes these.
    unsafe fn write<P: Stored>(
        v: [f32; 4],
        w: [Weight<P>; 2],
        x: [(usize, &[f32]); 2],
        (out, n): (Out, usize),
    ) {
        for (i, v) in v.into_iter().enumerate() {
            let ((col, _, _, bias), (m, sums)) = (w[i / 2], x[i % 2]);
            let twin = (i / 2 == 1 && col == w[0].0) || (i % 2 == 1 && m == x[0].0);
            if twin {
                continue;
            }
            let v = match bias {
                Some(b) => v + bias_term(b, sums),
                None => v,
            };
            out.write(m, col, n, v);
        }
    }

    /// Weight rows `w` against rows of x `x`, without the bias part: outputs
    /// `[(w0, x0), (w0, x1), (w1, x0), (w1, x1)]`. A multiply-add a span (span `s` into
    /// accumulator `s % 4`), on its blocks' totals summed, as [`super::super::fold`] does.
    #[target_feature(enable = "neon,i8mm")]
    #[inline]
    unsafe fn quad<const KIND: u32, P: Stored>(
        w: [&[u8]; 2],
        scales: [&[P]; 2],
        x: [Row; 2],
        shift: u32,
    ) -> [f32; 4] {
        let span = x[0].span;
        let mut acc = [vdupq_n_f32(0.0); ACCUMULATORS];
        for (s, b) in (0..x[0].blocks).step_by(span).enumerate() {
            let mut t = totals::<KIND>(w, x, b);
            for b in b + 1..b + span {
                let u = totals::<KIND>(w, x, b);
                t = (vaddq_s32(t.0, u.0), vaddq_s32(t.1, u.1));
            }
            let c = |half: usize| -> float32x4_t {
                let c: [f32; 4] =
                    std::array::from_fn(|i| block_scale(scales[i / 2], shift, &x[i % 2], b, half));
                vld1q_f32(c.as_ptr())
            };
            let a = &mut acc[s % ACCUMULATORS];
            *a = match P::PER_STEP {
                2 => {
                    let a = vfmaq_f32(*a, c(0), vcvtq_f32_s32(t.0));
                    vfmaq_f32(a, c(1), vcvtq_f32_s32(t.1))
                }
                _ => vfmaq_f32(*a, c(0), vcvtq_f32_s32(vaddq_s32(t.0, t.1))),
            };
        }
        let sum = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut v = [0f32; 4];
        vst1q_f32(v.as_mut_ptr(), sum);
        v
    }

    /// Block `b`'s totals of its first and second group (lanes {0, 1, 4, 5}, {2, 3, 6, 7}:
    /// [`Totals`]), 4 outputs a register.
    #[target_feature(enable = "neon,i8mm")]
    #[inline]
    unsafe fn totals<const KIND: u32>(
        w: [&[u8]; 2],
        x: [Row; 2],
        b: usize,
    ) -> (int32x4_t, int32x4_t) {
        let step = block_bytes(KIND);
        let q = w.map(|w| block_codes::<KIND>(w.as_ptr().add(b * step)));
        // 8-byte runs k of both rows (runs 0 and 2 are lanes {0, 1} and {4, 5}).
        let runs = |v: [[int8x16_t; 2]; 2]| -> [int8x16_t; 4] {
            let zip = |h: usize, second: bool| {
                let (a, c) = (vreinterpretq_s64_s8(v[0][h]), vreinterpretq_s64_s8(v[1][h]));
                vreinterpretq_s8_s64(if second {
                    vzip2q_s64(a, c)
                } else {
                    vzip1q_s64(a, c)
                })
            };
            [zip(0, false), zip(0, true), zip(1, false), zip(1, true)]
        };
        let codes = runs(q);
        let digit = |d: [&[i8]; 2]| {
            let at = |r: usize, h: usize| vld1q_s8(d[r].as_ptr().add(b * BLOCK + 16 * h));
            let x = runs([[at(0, 0), at(0, 1)], [at(1, 0), at(1, 1)]]);
            let first = mmla(mmla(vdupq_n_s32(0), codes[0], x[0]), codes[2], x[2]);
            let second = mmla(mmla(vdupq_n_s32(0), codes[1], x[1]), codes[3], x[3]);
            (first, second)
        };
        let (hi, lo) = (digit([x[0].hi, x[1].hi]), digit([x[0].lo, x[1].lo]));
        let mut t = [(hi.0, lo.0), (hi.1, lo.1)]
            .map(|(h, l)| vaddq_s32(vshlq_n_s32::<{ DIGIT_SHIFT as i32 }>(h), l));
        if KIND == 8 {
            // The shifted codes' `128 · Σx` of each group, per row of x.
            let sums = x.map(|x| Totals::of(std::array::from_fn(|l| x.lane_sums[b * LANES + l])));
            let s = |f: fn(&Totals) -> i32| {
                let v = [f(&sums[0]), f(&sums[1]), f(&sums[0]), f(&sums[1])];
                vshlq_n_s32::<7>(vld1q_s32(v.as_ptr()))
            };
            t = [
                vaddq_s32(t[0], s(|t| t.first)),
                vaddq_s32(t[1], s(|t| t.second)),
            ];
        }
        (t[0], t[1])
    }

    /// `acc + a · bᵀ`, `a` and `b` each 2 rows of 8 bytes: `smmla`.
    #[target_feature(enable = "neon,i8mm")]
    #[inline]
    unsafe fn mmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        std::arch::asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
        acc
    }
}
