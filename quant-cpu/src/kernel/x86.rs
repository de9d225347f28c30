//! AVX2 + FMA kernels (x86-64) for every format (and, in [`avx512`], the same arithmetic in
//! 16-lane registers): codes unpacked in registers in the lane order
//! of [`super::layout`], four independent accumulators per row so the FMA latency is hidden
//! even for one row. One or two rows multiply codes unpacked in registers; more rows multiply
//! a dequantized copy of the weight row kept in L1, so each weight is unpacked once for all.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::layout::{LANES, STEP, VECTORS};
use super::{Format, Operands, Out};

/// `f::<BITS>(args)` for the format's bit width (a covered one: `Format::new` checked it).
macro_rules! by_bits {
    ($bits:expr, $f:ident($($arg:expr),*)) => {
        match $bits {
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            _ => $f::<8>($($arg),*),
        }
    };
}

pub(super) mod avx512;

/// Whether the CPU has AVX2 and FMA (checked once).
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// The formats these kernels cover: every one `Format::new` accepts.
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
    by_bits!(ops.format.bits, columns(ops, cols, out))
}

/// Rows per pass over a weight row unpacked in registers; more rows go through a dequantized
/// copy of the row in L1 (`buffered`), which unpacks each weight once for all of them.
const REGISTER_ROWS: usize = 2;

thread_local! {
    /// One weight row dequantized in lane order, per thread (the caller and each helper).
    static W_ROW: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[target_feature(enable = "avx2,fma")]
unsafe fn columns<const BITS: u32>(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    if ops.m > REGISTER_ROWS {
        return W_ROW.with_borrow_mut(|w| {
            w.resize(ops.k, 0.0);
            for n in cols {
                buffered::<BITS>(ops, n, w, out);
            }
        });
    }
    for n in cols {
        match ops.m {
            2 => rows::<BITS, 2>(ops, n, 0, out),
            1 => rows::<BITS, 1>(ops, n, 0, out),
            _ => {}
        }
    }
}

/// Every row of x against weight row `n`, dequantized once into `w` (lane order, the same
/// `fma(s, q, b)` values `rows` makes in registers, so both give the same bits).
#[target_feature(enable = "avx2,fma")]
unsafe fn buffered<const BITS: u32>(ops: &Operands, n: usize, w: &mut [f32], out: Out) {
    dequantize_lanes::<BITS>(ops, n, w);
    let mut m = 0;
    while m + 2 <= ops.m {
        dot::<2>(ops, w, m, n, out);
        m += 2;
    }
    if m < ops.m {
        dot::<1>(ops, w, m, n, out);
    }
}

/// Weight row `n` as f32 in lane order.
#[target_feature(enable = "avx2,fma")]
unsafe fn dequantize_lanes<const BITS: u32>(ops: &Operands, n: usize, w: &mut [f32]) {
    debug_assert!(w.len() >= ops.k);
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let steps = ops.format.group / STEP;
    let step_bytes = STEP * BITS as usize / 8;
    for g in 0..ops.k / ops.format.group {
        let (s, b) = (_mm256_set1_ps(scales.get(g)), _mm256_set1_ps(biases.get(g)));
        for step in g * steps..(g + 1) * steps {
            let q = codes::<BITS>(row.add(step * step_bytes));
            for (v, q) in q.into_iter().enumerate() {
                let at = w.as_mut_ptr().add(step * STEP + v * LANES);
                _mm256_storeu_ps(at, _mm256_fmadd_ps(s, q, b));
            }
        }
    }
}

/// Rows `m0..m0 + R` of x against a dequantized weight row, accumulated as `rows` does.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot<const R: usize>(ops: &Operands, w: &[f32], m0: usize, n: usize, out: Out) {
    let xs = x_rows::<R>(ops, m0);
    let mut acc = [[_mm256_setzero_ps(); VECTORS]; R];
    for step in 0..ops.k / STEP {
        for v in 0..VECTORS {
            let at = step * STEP + v * LANES;
            let w = _mm256_loadu_ps(w.as_ptr().add(at));
            for (acc, x) in acc.iter_mut().zip(&xs) {
                acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(at)), w, acc[v]);
            }
        }
    }
    for (r, a) in acc.into_iter().enumerate() {
        out.write(m0 + r, n, ops.n, reduce(a));
    }
}

/// Where rows `m0..m0 + R` of x start.
#[inline]
fn x_rows<const R: usize>(ops: &Operands, m0: usize) -> [*const f32; R] {
    std::array::from_fn(|r| ops.x[(m0 + r) * ops.k..].as_ptr())
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

/// Rows `m0..m0 + R` of x against weight row `n`: each step's 32 codes are unpacked and
/// dequantized once (`fma(s, q, b)`), then multiplied into every row's accumulators
/// (`fma(x, w, acc[v])`).
#[target_feature(enable = "avx2,fma")]
unsafe fn rows<const BITS: u32, const R: usize>(ops: &Operands, n: usize, m0: usize, out: Out) {
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let xs = x_rows::<R>(ops, m0);
    let mut acc = [[_mm256_setzero_ps(); VECTORS]; R];
    let steps = ops.format.group / STEP;
    let step_bytes = STEP * BITS as usize / 8;
    for g in 0..ops.k / ops.format.group {
        let (s, b) = (_mm256_set1_ps(scales.get(g)), _mm256_set1_ps(biases.get(g)));
        for step in g * steps..(g + 1) * steps {
            let q = codes::<BITS>(row.add(step * step_bytes));
            for (v, q) in q.into_iter().enumerate() {
                let w = _mm256_fmadd_ps(s, q, b);
                for r in 0..R {
                    let x = _mm256_loadu_ps(xs[r].add(step * STEP + v * LANES));
                    acc[r][v] = _mm256_fmadd_ps(x, w, acc[r][v]);
                }
            }
        }
    }
    for (r, a) in acc.into_iter().enumerate() {
        out.write(m0 + r, n, ops.n, reduce(a));
    }
}

/// The 32 codes of a step starting at `at`, as f32, in lane order.
///
/// # Safety
/// AVX2, and the step's `4 * BITS` bytes are readable (nothing past them is read).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn codes<const BITS: u32>(at: *const u8) -> [__m256; VECTORS] {
    // No closure (`map`): a closure would not inline with this function's target features.
    let q = codes_i::<BITS>(at);
    [
        _mm256_cvtepi32_ps(q[0]),
        _mm256_cvtepi32_ps(q[1]),
        _mm256_cvtepi32_ps(q[2]),
        _mm256_cvtepi32_ps(q[3]),
    ]
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
            let (lo, hi, nibble) = (bytes8(at, 0), bytes8(at, 1), _mm256_set1_epi32(0xF));
            [
                _mm256_and_si256(lo, nibble),
                _mm256_srli_epi32::<4>(lo),
                _mm256_and_si256(hi, nibble),
                _mm256_srli_epi32::<4>(hi),
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
unsafe fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
}

/// Weight row `n` as f32 in natural order (`fma(s, q, b)` per code, as the portable
/// `dequantize_row`), for the panels of a prefill.
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
    let group = ops.format.group;
    for g in 0..ops.k / group {
        let (s, b) = (_mm256_set1_ps(scales.get(g)), _mm256_set1_ps(biases.get(g)));
        for k in (g * group..(g + 1) * group).step_by(LANES) {
            let q = _mm256_cvtepi32_ps(in_order8::<BITS>(row.add(k * BITS as usize / 8)));
            _mm256_storeu_ps(dst.as_mut_ptr().add(k), _mm256_fmadd_ps(s, q, b));
        }
    }
}
