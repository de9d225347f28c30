//! AVX2 + FMA kernels (x86-64) for every format (and, in [`avx512`], the same arithmetic in
//! 16-lane registers): codes unpacked in registers in the lane order of [`super::layout`],
//! four independent group sums per row, rows of x two at a time where there are two (the
//! weight row stays in L1 for the next pair).

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::float::E2M1;
use super::layout::{LANES, STEP, VECTORS};
use super::vector::{by_bits, by_stored, each_row_by_steps, Groups};
use super::{Format, Mode, Operands, Out, Stored};

pub(super) mod avx512;

/// How far ahead of the codes being unpacked the kernels ask for weight bytes, so that the
/// next rows arrive from memory while these are multiplied. A block of columns reads a few
/// short rows side by side, which the hardware prefetchers follow too late: without it a
/// SmolLM2-135M decode step took ~1.5x as long, with 2-16 KB alike (measured; 8 KB is a few
/// hundred nanoseconds of this machine's bandwidth).
const PREFETCH: usize = 8192;

/// Whether the CPU has AVX2 and FMA (checked once).
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// The formats these kernels cover: every one `Format::with_mode` accepts.
pub fn covers(format: Format) -> bool {
    matches!(format.bits, 2 | 3 | 4 | 5 | 6 | 8)
}

/// Columns `cols` of `out[m, n]`, x in lane order.
///
/// # Safety
/// The CPU has AVX2 and FMA (`available`), the format is covered, the operands' slices have
/// the sizes `Operands` describes, and as `kernel::columns`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    debug_assert!(covers(ops.format) && ops.k.is_multiple_of(ops.format.group));
    debug_assert!(ops.x.len() >= ops.m * ops.k);
    by_stored!(ops, groups => by_bits!(ops.format.bits, columns::<_>(ops, groups, cols, out)))
}

/// Rows of x two at a time (`pair`), a last odd one alone (`row`); the weight row stays in L1
/// between pairs. One call for the range, so the kernels inline with their step count known (a
/// call per row and column, with a division and bounds checks, cost about a fifth of a decode
/// product).
#[target_feature(enable = "avx2,fma")]
unsafe fn columns<const BITS: u32, P: Stored>(
    ops: &Operands,
    params: Groups<P>,
    cols: std::ops::Range<usize>,
    out: Out,
) {
    // SAFETY: the kernel's features are this function's; as `matmul`.
    each_row_by_steps!(ops, params, cols, out, row::<BITS, P>, pair::<BITS, P>)
}

/// One row of x (in lane order) against one weight row, without its bias part: per group,
/// each step's 32 codes are unpacked and converted (or decoded), then multiplied into the group
/// sums (`p = fma(q, x, p)`), which the group's scale folds into the accumulators
/// (`acc = fma(s, p, acc)`; `nvfp4`: a step of two groups, each vector its group's scale).
///
/// # Safety
/// AVX2 and FMA; `w` holds the codes and `x` the values of `scales.len() / P::PER_STEP`
/// blocks of `STEPS` steps.
#[target_feature(enable = "avx2,fma")]
#[inline]
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
    let mut acc = [_mm256_setzero_ps(); VECTORS];
    for s in scales.chunks_exact(P::PER_STEP) {
        let mut p = [_mm256_setzero_ps(); VECTORS];
        for _ in 0..STEPS {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH) as *const i8);
            let q = codes::<BITS, P>(at);
            for (v, q) in q.into_iter().enumerate() {
                let x = _mm256_loadu_ps(xs.add(v * LANES));
                p[v] = _mm256_fmadd_ps(q, x, p[v]);
            }
            at = at.add(step_bytes);
            xs = xs.add(STEP);
        }
        let s = block_scales(s);
        for v in 0..VECTORS {
            acc[v] = _mm256_fmadd_ps(s[v % 2], p[v], acc[v]);
        }
    }
    reduce(acc)
}

/// Two rows of x (in lane order) against one weight row, each with the bits `row` gives it: the
/// same FMAs in the same order per lane, taken vector by vector so that a step's codes are
/// unpacked once for both rows. Two rows' accumulators (8), one vector's group sums for each
/// (2) and the codes fit the 16 registers, which `row`'s order (every vector's group sums at
/// once) would not. Vectors 0 and 2 (1 and 3) come from the same 4-bit bytes, so they are
/// taken one after the other: the widened bytes live briefly and are not spilled.
///
/// # Safety
/// As `row`, for both rows of x.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pair<const BITS: u32, const STEPS: usize, P: Stored>(
    w: &[u8],
    x: [&[f32]; 2],
    scales: &[P],
) -> [f32; 2] {
    let step_bytes = STEP * BITS as usize / 8;
    let blocks = scales.len() / P::PER_STEP;
    debug_assert!(w.len() >= blocks * STEPS * step_bytes);
    debug_assert!(x.iter().all(|x| x.len() >= blocks * STEPS * STEP));
    let (mut at, mut x0, mut x1) = (w.as_ptr(), x[0].as_ptr(), x[1].as_ptr());
    const { assert!(VECTORS == 4) };
    let mut acc = [[_mm256_setzero_ps(); VECTORS]; 2];
    for s in scales.chunks_exact(P::PER_STEP) {
        for t in 0..STEPS {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(t * step_bytes + PREFETCH) as *const i8);
        }
        let s = block_scales(s);
        for v in [0, 2, 1, 3] {
            let (mut p0, mut p1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for t in 0..STEPS {
                let q = codes::<BITS, P>(at.add(t * step_bytes))[v];
                let lane = t * STEP + v * LANES;
                p0 = _mm256_fmadd_ps(q, _mm256_loadu_ps(x0.add(lane)), p0);
                p1 = _mm256_fmadd_ps(q, _mm256_loadu_ps(x1.add(lane)), p1);
            }
            acc[0][v] = _mm256_fmadd_ps(s[v % 2], p0, acc[0][v]);
            acc[1][v] = _mm256_fmadd_ps(s[v % 2], p1, acc[1][v]);
        }
        at = at.add(STEPS * step_bytes);
        (x0, x1) = (x0.add(STEPS * STEP), x1.add(STEPS * STEP));
    }
    [reduce(acc[0]), reduce(acc[1])]
}

/// The accumulators summed in `scalar::reduce`'s order, so every kernel agrees bit for bit.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn reduce(a: [__m256; VECTORS]) -> f32 {
    sum_lanes(_mm256_add_ps(
        _mm256_add_ps(a[0], a[1]),
        _mm256_add_ps(a[2], a[3]),
    ))
}

/// A block's scales broadcast, the even vectors' then the odd ones' (one scale but for
/// `nvfp4`, whose step holds two groups: vectors 0 and 2 the first, 1 and 3 the second).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn block_scales<P: Stored>(s: &[P]) -> [__m256; 2] {
    [
        _mm256_set1_ps(s[0].widen()),
        _mm256_set1_ps(s[P::PER_STEP - 1].widen()),
    ]
}

/// The 32 codes of a step starting at `at`, as f32 (their values in a float mode), in lane
/// order.
///
/// # Safety
/// AVX2, and the step's `4 * BITS` bytes are readable (nothing past them is read).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn codes<const BITS: u32, P: Stored>(at: *const u8) -> [__m256; VECTORS] {
    // No closure (`map`): a closure would not inline with this function's target features.
    let q = codes_i::<BITS>(at);
    match P::FLOAT {
        true => [
            value::<BITS>(q[0]),
            value::<BITS>(q[1]),
            value::<BITS>(q[2]),
            value::<BITS>(q[3]),
        ],
        false => [
            _mm256_cvtepi32_ps(q[0]),
            _mm256_cvtepi32_ps(q[1]),
            _mm256_cvtepi32_ps(q[2]),
            _mm256_cvtepi32_ps(q[3]),
        ],
    }
}

/// The float mode values of 8 codes: E2M1 (4 bits) or E4M3 (8 bits), as `float::e2m1` and
/// `float::e4m3`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn value<const BITS: u32>(q: __m256i) -> __m256 {
    match BITS {
        4 => e2m1(q),
        _ => e4m3(q),
    }
}

/// E2M1: the magnitude from a table of 8 by the low 3 bits (`vpermps`), bit 3 the sign.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn e2m1(q: __m256i) -> __m256 {
    let table = _mm256_loadu_ps(E2M1.as_ptr());
    let sign = _mm256_slli_epi32::<28>(_mm256_and_si256(q, _mm256_set1_epi32(8)));
    _mm256_xor_ps(
        _mm256_permutevar8x32_ps(table, q),
        _mm256_castsi256_ps(sign),
    )
}

/// E4M3 built in f32 bits: exponent e > 0 is `2^(e-7)·(1 + m/8)`, the f32 with exponent
/// `e + 120` and mantissa `m`; e = 0 is `m · 2⁻⁹`. All exact; bit 7 the sign.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn e4m3(q: __m256i) -> __m256 {
    let magnitude = _mm256_and_si256(q, _mm256_set1_epi32(0x7F));
    let normal = _mm256_add_epi32(
        _mm256_slli_epi32::<20>(magnitude),
        _mm256_set1_epi32(120 << 23),
    );
    let m = _mm256_cvtepi32_ps(_mm256_and_si256(magnitude, _mm256_set1_epi32(7)));
    let subnormal = _mm256_mul_ps(m, _mm256_set1_ps(1.0 / 512.0));
    let is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), magnitude);
    let v = _mm256_blendv_ps(
        _mm256_castsi256_ps(normal),
        subnormal,
        _mm256_castsi256_ps(is_subnormal),
    );
    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(q, _mm256_set1_epi32(0x80)));
    _mm256_or_ps(v, _mm256_castsi256_ps(sign))
}

/// The 32 codes of a step starting at `at`, as integers, in lane order.
///
/// # Safety
/// As `codes`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn codes_i<const BITS: u32>(at: *const u8) -> [__m256i; VECTORS] {
    match BITS {
        8 => [bytes8(at, 0), bytes8(at, 1), bytes8(at, 2), bytes8(at, 3)],
        4 => {
            let (a, b, nibble) = (bytes8(at, 0), bytes8(at, 1), _mm256_set1_epi32(0xF));
            [
                _mm256_and_si256(a, nibble),
                _mm256_and_si256(b, nibble),
                _mm256_srli_epi32::<4>(a),
                _mm256_srli_epi32::<4>(b),
            ]
        }
        2 => {
            let (b, two) = (bytes8(at, 0), _mm256_set1_epi32(0x3));
            [
                _mm256_and_si256(b, two),
                _mm256_and_si256(_mm256_srli_epi32::<2>(b), two),
                _mm256_and_si256(_mm256_srli_epi32::<4>(b), two),
                _mm256_srli_epi32::<6>(b),
            ]
        }
        _ => {
            let n = BITS as usize;
            [
                in_order8::<BITS>(at),
                in_order8::<BITS>(at.add(n)),
                in_order8::<BITS>(at.add(2 * n)),
                in_order8::<BITS>(at.add(3 * n)),
            ]
        }
    }
}

/// Bytes `8i..8i + 8` at `at`, zero-extended to 32-bit lanes.
///
/// # Safety
/// AVX2, and the 8 bytes are readable.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn bytes8(at: *const u8, i: usize) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(at.add(8 * i) as *const __m128i))
}

/// The 8 codes in the `BITS` bytes at `at`, in order, as integers.
///
/// # Safety
/// AVX2, and `BITS` bytes at `at` are readable (exactly those are read).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn in_order8<const BITS: u32>(at: *const u8) -> __m256i {
    let mut bytes = [0u8; 8];
    std::ptr::copy_nonoverlapping(at, bytes.as_mut_ptr(), BITS as usize);
    let word = u64::from_le_bytes(bytes);
    // Codes 0..4 lie in the low 4 * BITS bits, codes 4..8 in the next 4 * BITS.
    let (lo, hi) = (word as u32 as i32, (word >> (4 * BITS)) as u32 as i32);
    let b = BITS as i32;
    let shifts = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 0, b, 2 * b, 3 * b);
    let words = _mm256_set_m128i(_mm_set1_epi32(hi), _mm_set1_epi32(lo));
    _mm256_and_si256(
        _mm256_srlv_epi32(words, shifts),
        _mm256_set1_epi32((1 << BITS) - 1),
    )
}

/// The 8 lanes summed pairwise (`scalar::reduce`'s order).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
}

/// Weight row `n` as f32 in natural order (`fma(s, q, b)` per code, or `value(q) · s` in a
/// float mode, as the portable `dequantize_row`), for the panels of a prefill.
///
/// # Safety
/// As `matmul`; `dst` holds `ops.k` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    by_bits!(ops.format.bits, dequantize(ops, n, dst))
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dequantize<const BITS: u32>(ops: &Operands, n: usize, dst: &mut [f32]) {
    debug_assert!(dst.len() >= ops.k);
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let (group, float) = (ops.format.group, ops.format.mode != Mode::Affine);
    for g in 0..ops.k / group {
        let b = biases.map_or(0.0, |b| b.get(g));
        let (s, b) = (_mm256_set1_ps(scales.get(g)), _mm256_set1_ps(b));
        for k in (g * group..(g + 1) * group).step_by(LANES) {
            let q = in_order8::<BITS>(row.add(k * BITS as usize / 8));
            let w = match float {
                true => _mm256_mul_ps(value::<BITS>(q), s),
                false => _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(q), b),
            };
            _mm256_storeu_ps(dst.as_mut_ptr().add(k), w);
        }
    }
}
