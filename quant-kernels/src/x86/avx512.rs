//! AVX-512 kernels (x86-64 with AVX-512 F and DQ): the AVX2 kernels' arithmetic in registers
//! twice as wide. A step's four 8-lane vectors travel as two 16-lane ones (vectors 0|1 and
//! 2|3), so each lane sees the same `fma(q, x, p)` and `fma(s, p, acc)` as in AVX2, and the
//! accumulators are split back into four and summed in `reduce`'s order: the same bits as the
//! AVX2 and portable kernels.
//!
//! Beyond the width, three things make them faster than AVX2:
//! - 8-, 4- and 2-bit codes are unpacked straight into 16 lanes (the lane order of `layout`
//!   is chosen so that one widening of the step's bytes gives vectors 0|1);
//! - several output columns are computed together ([`QUAD`] for one row of x and codes of up
//!   to 4 bits, [`PAIR`] for more rows), so their independent FMA chains hide each other's
//!   latency and x is loaded once for all of them;
//! - the kernels are generic over the dtype the scales and biases are stored in (`Stored`),
//!   and the product's shape is worked out once per call, so the loops never branch on
//!   either.

use std::arch::x86_64::*;

use super::super::float::E2M1;
use super::super::layout::{LANES, STEP};
use super::super::vector::{by_bits, by_stored, with_sums, Groups};
use super::super::{bias_term, Operands, Out, Stored};
use super::{codes_i, reduce};

/// Output columns (weight rows) per pass for one row of x: eight independent chains.
const QUAD: usize = 4;
/// Output columns per pass for two and more rows of x.
const PAIR: usize = 2;

/// Whether one row of x takes [`QUAD`] columns a pass with `BITS`-bit codes, rather than one.
/// Codes of 5 bits or more stream from memory faster a column at a time: against 4 columns, a
/// decode step's products took 0.75 as long at 8 bits (SmolLM2-135M), 0.81 at 8, 0.92 at 6 and
/// 0.96 at 5 (the 3.87 B bench model's shapes), and 0.91 in `mxfp8`; at 4 bits and below 4
/// columns stay (1.02 at 4, 1.06 at 2, 1.16 in `mxfp4`, 1.07 in `nvfp4`). Family-25 EPYC,
/// 2026-11-28, exact numerics, one column as variant 1 (`MLX_DISTRIBUTED_AB=1` with
/// `worker generate --exact --max-tokens 1500`, or `EXACT=1 BITS=b int8_layer`).
const fn quad_for_one_row(bits: u32) -> bool {
    bits <= 4
}

/// Whether the CPU has AVX-512 F and DQ (and AVX2 and FMA, which the code unpacking uses).
pub fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        super::available()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512dq")
    })
}

/// Columns `cols` of `out[m, n]`, x in lane order.
///
/// # Safety
/// The CPU has AVX-512 F/DQ, AVX2 and FMA (`available`), and as `super::matmul`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(crate) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    debug_assert!(ops.k.is_multiple_of(ops.format.group));
    debug_assert!(ops.x.len() >= ops.m * ops.k);
    by_stored!(ops, groups => by_bits!(ops.format.bits, columns::<_>(ops, groups, cols, out)))
}

/// A product's shape as the kernels walk it, worked out once per call.
#[derive(Clone, Copy)]
struct Shape {
    k: usize,
    /// Groups per weight row.
    groups: usize,
    /// Blocks per weight row: groups, or steps of two groups (`nvfp4`).
    blocks: usize,
    /// Steps per block.
    steps: usize,
    step_bytes: usize,
    row_bytes: usize,
    /// The output's columns (the product's n).
    n: usize,
}

/// `C` output columns from `n0`: their packed rows, scales and biases.
struct Block<P> {
    n0: usize,
    rows: *const u8,
    scales: *const P,
    biases: *const P,
}

impl<P: Stored> Block<P> {
    /// Packed weight row `c` of the block.
    #[inline(always)]
    fn row(&self, shape: &Shape, c: usize) -> *const u8 {
        self.rows.wrapping_add(c * shape.row_bytes)
    }

    /// Column `c`'s biases.
    ///
    /// # Safety
    /// The block has column `c`.
    #[inline(always)]
    unsafe fn biases(&self, shape: &Shape, c: usize) -> &[P] {
        std::slice::from_raw_parts(self.biases.add(c * shape.groups), shape.groups)
    }
}

#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn columns<const BITS: u32, P: Stored>(
    ops: &Operands,
    params: Groups<P>,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    let groups = ops.k / ops.format.group;
    let shape = Shape {
        k: ops.k,
        groups,
        blocks: groups / P::PER_STEP,
        steps: (ops.format.group / STEP).max(1),
        step_bytes: STEP * BITS as usize / 8,
        row_bytes: ops.format.row_bytes(ops.k),
        n: ops.n,
    };
    assert!(
        ops.w.len() >= cols.end * shape.row_bytes
            && params.scales.len() >= cols.end * groups
            && (P::FLOAT || params.biases.len() >= cols.end * groups),
        "the weight, scales and biases hold n rows"
    );
    with_sums(ops, |sums| {
        blocks::<BITS, P>(ops, &shape, params, cols, sums, out)
    })
}

/// Columns `cols`, a block at a time.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn blocks<const BITS: u32, P: Stored>(
    ops: &Operands,
    shape: &Shape,
    params: Groups<P>,
    cols: std::ops::Range<usize>,
    sums: &[f32],
    out: Out,
) {
    let block = |n: usize| Block {
        n0: n,
        rows: ops.w.as_ptr().add(n * shape.row_bytes),
        scales: params.scales.as_ptr().add(n * shape.groups),
        // No biases in a float mode: never read.
        biases: params.biases.as_ptr().wrapping_add(n * shape.groups),
    };
    let mut n = cols.start;
    while n < cols.end {
        let left = cols.end - n;
        let b = block(n);
        n += match ops.m {
            0 => left,
            1 if left >= QUAD && quad_for_one_row(BITS) => {
                rows::<BITS, 1, QUAD, P>(ops.x, sums, 0, shape, &b, out)
            }
            1 => rows::<BITS, 1, 1, P>(ops.x, sums, 0, shape, &b, out),
            2 if left >= PAIR => rows::<BITS, 2, PAIR, P>(ops.x, sums, 0, shape, &b, out),
            2 => rows::<BITS, 2, 1, P>(ops.x, sums, 0, shape, &b, out),
            m => stacked::<BITS, P>(ops.x, m, sums, shape, &b, left.min(PAIR), out),
        };
    }
}

/// Every row of x (`m` of them), two at a time, against the block's `c` (one or [`PAIR`])
/// columns; returns `c`. The block's packed rows stay in L1 between the passes, and
/// unpacking them again costs less than converting them once into a buffer and loading
/// that (measured).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn stacked<const BITS: u32, P: Stored>(
    x: &[f32],
    m: usize,
    sums: &[f32],
    shape: &Shape,
    block: &Block<P>,
    c: usize,
    out: Out,
) -> usize {
    let mut m0 = 0;
    while m0 + 2 <= m {
        match c {
            PAIR => rows::<BITS, 2, PAIR, P>(x, sums, m0, shape, block, out),
            _ => rows::<BITS, 2, 1, P>(x, sums, m0, shape, block, out),
        };
        m0 += 2;
    }
    if m0 < m {
        match c {
            PAIR => rows::<BITS, 1, PAIR, P>(x, sums, m0, shape, block, out),
            _ => rows::<BITS, 1, 1, P>(x, sums, m0, shape, block, out),
        };
    }
    c
}

/// The step's 32 codes at `at` as two 16-lane f32 vectors: AVX2 vectors 0|1 and 2|3.
///
/// # Safety
/// AVX-512 F, and the step's `4 * BITS` bytes are readable (nothing past them is read).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn codes16<const BITS: u32, P: Stored>(at: *const u8) -> [__m512; 2] {
    let widen = |i: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(at.add(16 * i) as *const __m128i));
    if P::FLOAT {
        return match BITS {
            8 => [e4m3(at), e4m3(at.add(16))],
            _ => {
                let bytes = widen(0);
                [e2m1(bytes), e2m1(_mm512_srli_epi32::<4>(bytes))]
            }
        };
    }
    match BITS {
        8 => [_mm512_cvtepi32_ps(widen(0)), _mm512_cvtepi32_ps(widen(1))],
        4 => {
            let bytes = widen(0);
            [
                _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0xF))),
                _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(bytes)),
            ]
        }
        2 => {
            // Byte l (lanes l and 8 + l) holds vector v's code of lane l at bits 2v.
            let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(at as *const __m128i));
            let bytes = _mm512_broadcast_i64x4(b);
            let two = _mm512_set1_epi32(0x3);
            let shift = |lo: i32, hi: i32| {
                let s = _mm512_inserti64x4::<1>(_mm512_set1_epi32(lo), _mm256_set1_epi32(hi));
                _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(bytes, s), two))
            };
            [shift(0, 2), shift(4, 6)]
        }
        _ => {
            let q = codes_i::<BITS>(at);
            [join(q[0], q[1]), join(q[2], q[3])]
        }
    }
}

/// E2M1 values of the low 4 bits of each lane: a 16-entry table, signs included (`vpermps`).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn e2m1(q: __m512i) -> __m512 {
    _mm512_permutexvar_ps(q, _mm512_loadu_ps(E2M1.as_ptr()))
}

/// E4M3 values of the 16 bytes at `at` as MLX's `FromFP8` makes them: each byte's bits 0..7
/// shifted left 7 as an f16 (bit 7 carried on into the sign), widened, times 256. Exact.
///
/// # Safety
/// AVX-512 F, and the 16 bytes are readable.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn e4m3(at: *const u8) -> __m512 {
    let b = _mm256_cvtepu8_epi16(_mm_loadu_si128(at as *const __m128i));
    let sign = _mm256_and_si256(b, _mm256_set1_epi16(0x80));
    // Bit 7 lands on bit 14; adding it there again carries it to bit 15.
    let h = _mm256_slli_epi16::<7>(_mm256_add_epi16(b, sign));
    _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0))
}

/// `lo | hi` as one 16-lane f32 vector (plain functions, not closures: they inline with the
/// callers' target features).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn join(lo: __m256i, hi: __m256i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi))
}

/// Two 16-lane accumulators as the AVX2 kernels' four, summed in their order.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn reduce16(acc: [__m512; 2]) -> f32 {
    reduce([
        _mm512_castps512_ps256(acc[0]),
        _mm512_extractf32x8_ps::<1>(acc[0]),
        _mm512_castps512_ps256(acc[1]),
        _mm512_extractf32x8_ps::<1>(acc[1]),
    ])
}

/// Each (row, column) pair's accumulators summed, plus its bias part, into `out`; `sums`
/// are the group sums of x from row `m0`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn write<const R: usize, const C: usize, P: Stored>(
    acc: [[[__m512; 2]; C]; R],
    m0: usize,
    sums: *const f32,
    block: &Block<P>,
    shape: &Shape,
    out: Out,
) {
    let groups = shape.groups;
    for (r, acc) in acc.into_iter().enumerate() {
        let sums = std::slice::from_raw_parts(sums.add(r * groups), groups);
        for (c, a) in acc.into_iter().enumerate() {
            let v = match P::FLOAT {
                true => reduce16(a),
                false => reduce16(a) + bias_term(block.biases(shape, c), sums),
            };
            out.write(m0 + r, block.n0 + c, shape.n, v);
        }
    }
}

/// Group sums folded into the accumulators with their column's scale: `acc = fma(s, p, acc)`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn fold<const R: usize, const C: usize>(
    acc: &mut [[[__m512; 2]; C]; R],
    p: &[[[__m512; 2]; C]; R],
    scales: [__m512; C],
) {
    for (c, s) in scales.into_iter().enumerate() {
        for r in 0..R {
            for h in 0..2 {
                acc[r][c][h] = _mm512_fmadd_ps(s, p[r][c][h], acc[r][c][h]);
            }
        }
    }
}

/// The columns' scales of group block `b`, broadcast (`nvfp4`: the block's first group in
/// lanes 0..8, AVX2's vectors 0 and 2, its second in lanes 8..16).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn scales_of<const C: usize, P: Stored>(
    block: &Block<P>,
    shape: &Shape,
    b: usize,
) -> [__m512; C] {
    let mut scales = [_mm512_setzero_ps(); C];
    for (c, s) in scales.iter_mut().enumerate() {
        let at = block.scales.add(c * shape.groups + b * P::PER_STEP);
        *s = match P::PER_STEP {
            1 => _mm512_set1_ps((*at).widen()),
            _ => _mm512_insertf32x8::<1>(
                _mm512_set1_ps((*at).widen()),
                _mm256_set1_ps((*at.add(1)).widen()),
            ),
        };
    }
    scales
}

/// Rows `0..R` of x against the block's `C` columns, the codes unpacked in registers: per
/// group, `p = fma(q, x, p)` over its steps, then [`fold`]. Returns `C`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn rows<const BITS: u32, const R: usize, const C: usize, P: Stored>(
    x: &[f32],
    sums: &[f32],
    m0: usize,
    shape: &Shape,
    block: &Block<P>,
    out: Out,
) -> usize {
    debug_assert!(x.len() >= (m0 + R) * shape.k && sums.len() >= (m0 + R) * shape.groups);
    let (x, sums) = (
        x.as_ptr().add(m0 * shape.k),
        sums.as_ptr().add(m0 * shape.groups),
    );
    let mut acc = [[[_mm512_setzero_ps(); 2]; C]; R];
    for b in 0..shape.blocks {
        let mut p = [[[_mm512_setzero_ps(); 2]; C]; R];
        for step in b * shape.steps..(b + 1) * shape.steps {
            let mut q = [[_mm512_setzero_ps(); 2]; C];
            for (c, q) in q.iter_mut().enumerate() {
                let at = block.row(shape, c).add(step * shape.step_bytes);
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(super::PREFETCH) as *const i8);
                *q = codes16::<BITS, P>(at);
            }
            for h in 0..2 {
                for (r, p) in p.iter_mut().enumerate() {
                    let x = _mm512_loadu_ps(x.add(r * shape.k + step * STEP + h * 2 * LANES));
                    for c in 0..C {
                        p[c][h] = _mm512_fmadd_ps(q[c][h], x, p[c][h]);
                    }
                }
            }
        }
        fold(&mut acc, &p, scales_of::<C, P>(block, shape, b));
    }
    write(acc, m0, sums, block, shape, out);
    C
}
