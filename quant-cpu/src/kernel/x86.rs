//! AVX2 + FMA kernels (x86-64) for the formats whose 8 codes sit in one aligned word:
//! 2, 4 and 8 bits. The other formats take the portable kernel until they get their own.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::{Format, Operands, Out};

/// Rows of x multiplied together, so each weight is unpacked once per block.
const BLOCK: usize = 4;

/// Whether the CPU has AVX2 and FMA (checked once).
pub fn available() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// The formats these kernels cover.
pub fn covers(format: Format) -> bool {
    matches!(format.bits, 2 | 4 | 8)
}

/// Columns `cols` of `out[m, n]` for a covered format.
///
/// # Safety
/// The CPU has AVX2 and FMA (`available`), the format is covered, the operands' slices have
/// the sizes `Operands` describes, and as `kernel::columns`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    debug_assert!(covers(ops.format) && ops.k % ops.format.group == 0);
    debug_assert!(ops.x.len() >= ops.m * ops.k);
    for n in cols {
        let mut m = 0;
        while m < ops.m {
            let rows = (ops.m - m).min(BLOCK);
            match rows {
                4 => rows_by_row::<4>(ops, n, m, out),
                3 => rows_by_row::<3>(ops, n, m, out),
                2 => rows_by_row::<2>(ops, n, m, out),
                _ => rows_by_row::<1>(ops, n, m, out),
            }
            m += rows;
        }
    }
}

/// Rows `m0..m0 + R` of x against weight row `n`: each 8 codes are unpacked and dequantized
/// once (`fma(s, q, b)`), then multiplied into every row's accumulator (`fma(x, w, acc)`).
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_by_row<const R: usize>(ops: &Operands, n: usize, m0: usize, out: Out) {
    let row = ops.w_row(n);
    let (scales, biases) = ops.groups(n);
    let xs: [*const f32; R] = std::array::from_fn(|r| ops.x[(m0 + r) * ops.k..].as_ptr());
    let mut acc = [_mm256_setzero_ps(); R];
    let group = ops.format.group;
    for g in 0..ops.k / group {
        let (s, b) = (_mm256_set1_ps(scales[g]), _mm256_set1_ps(biases[g]));
        for k in (g * group..(g + 1) * group).step_by(8) {
            let w = _mm256_fmadd_ps(s, codes8(row, k, ops.format.bits), b);
            for r in 0..R {
                let x = _mm256_loadu_ps(xs[r].add(k));
                acc[r] = _mm256_fmadd_ps(x, w, acc[r]);
            }
        }
    }
    for (r, lanes) in acc.into_iter().enumerate() {
        out.write(m0 + r, n, ops.n, sum_lanes(lanes));
    }
}

/// Codes `k..k + 8` of a packed row (k a multiple of 8), as f32.
///
/// # Safety
/// AVX2, and `k + 8` codes fit in `row` (`k + 8 <= K`): the reads are unchecked.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn codes8(row: &[u8], k: usize, bits: u32) -> __m256 {
    debug_assert!((k + 8) * bits as usize / 8 <= row.len());
    let at = row.as_ptr().add(k * bits as usize / 8);
    let ints = match bits {
        8 => _mm256_cvtepu8_epi32(_mm_loadl_epi64(at as *const __m128i)),
        4 => {
            let word = (at as *const u32).read_unaligned();
            let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
            let v = _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), shifts);
            _mm256_and_si256(v, _mm256_set1_epi32(0xF))
        }
        _ => {
            let half = (at as *const u16).read_unaligned();
            let shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
            let v = _mm256_srlv_epi32(_mm256_set1_epi32(half as i32), shifts);
            _mm256_and_si256(v, _mm256_set1_epi32(0x3))
        }
    };
    _mm256_cvtepi32_ps(ints)
}

/// The 8 lanes summed in `scalar::sum_lanes`'s order, so both kernels agree bit for bit.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sum_lanes(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)))
}

/// Weight row `n` as f32 (`fma(s, q, b)` per code, as the portable `dequantize_row`), for
/// the panels of a prefill.
///
/// # Safety
/// As `matmul`; `dst` holds `ops.k` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    let row = ops.w_row(n);
    let (scales, biases) = ops.groups(n);
    let group = ops.format.group;
    for g in 0..ops.k / group {
        let (s, b) = (_mm256_set1_ps(scales[g]), _mm256_set1_ps(biases[g]));
        for k in (g * group..(g + 1) * group).step_by(8) {
            let w = _mm256_fmadd_ps(s, codes8(row, k, ops.format.bits), b);
            _mm256_storeu_ps(dst[k..k + 8].as_mut_ptr(), w);
        }
    }
}
