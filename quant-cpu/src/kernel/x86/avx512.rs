//! AVX-512 kernels (x86-64 with AVX-512 F and DQ): the AVX2 kernels' arithmetic in registers
//! twice as wide. A step's four 8-lane vectors travel as two 16-lane ones (vectors 0|1 and
//! 2|3), so each lane sees the same `fma(s, q, b)` and `fma(x, w, acc)` as in AVX2, and the
//! accumulators are split back into four and summed in `reduce`'s order: the same bits as
//! the AVX2 and portable kernels, with half the FMA, convert and load instructions. Codes are
//! unpacked by the AVX2 code (`codes_i`) and joined; every format is covered.

use std::arch::x86_64::*;

use super::super::layout::{LANES, STEP};
use super::super::{Operands, Out};
use super::{codes_i, reduce, x_rows, REGISTER_ROWS, W_ROW};

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
pub(in crate::kernel) unsafe fn matmul(ops: &Operands, cols: std::ops::Range<usize>, out: Out) {
    debug_assert!(ops.k.is_multiple_of(ops.format.group));
    debug_assert!(ops.x.len() >= ops.m * ops.k);
    by_bits!(ops.format.bits, columns(ops, cols, out))
}

#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
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

/// The step's 32 codes at `at` as two 16-lane f32 vectors: AVX2 vectors 0|1 and 2|3.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn codes16<const BITS: u32>(at: *const u8) -> [__m512; 2] {
    let q = codes_i::<BITS>(at);
    [join(q[0], q[1]), join(q[2], q[3])]
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

/// Rows `m0..m0 + R` of x against weight row `n`, the codes unpacked in registers (as
/// `super::rows`).
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn rows<const BITS: u32, const R: usize>(ops: &Operands, n: usize, m0: usize, out: Out) {
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let xs = x_rows::<R>(ops, m0);
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let steps = ops.format.group / STEP;
    let step_bytes = STEP * BITS as usize / 8;
    for g in 0..ops.k / ops.format.group {
        let (s, b) = (_mm512_set1_ps(scales.get(g)), _mm512_set1_ps(biases.get(g)));
        for step in g * steps..(g + 1) * steps {
            let q = codes16::<BITS>(row.add(step * step_bytes));
            for (h, q) in q.into_iter().enumerate() {
                let w = _mm512_fmadd_ps(s, q, b);
                for r in 0..R {
                    let x = _mm512_loadu_ps(xs[r].add(step * STEP + h * 2 * LANES));
                    acc[r][h] = _mm512_fmadd_ps(x, w, acc[r][h]);
                }
            }
        }
    }
    for (r, a) in acc.into_iter().enumerate() {
        out.write(m0 + r, n, ops.n, reduce16(a));
    }
}

/// Every row of x against weight row `n`, dequantized once into `w` (lane order), as
/// `super::buffered`.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
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

#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn dequantize_lanes<const BITS: u32>(ops: &Operands, n: usize, w: &mut [f32]) {
    debug_assert!(w.len() >= ops.k);
    let row = ops.w_row(n).as_ptr();
    let (scales, biases) = ops.groups(n);
    let steps = ops.format.group / STEP;
    let step_bytes = STEP * BITS as usize / 8;
    for g in 0..ops.k / ops.format.group {
        let (s, b) = (_mm512_set1_ps(scales.get(g)), _mm512_set1_ps(biases.get(g)));
        for step in g * steps..(g + 1) * steps {
            let q = codes16::<BITS>(row.add(step * step_bytes));
            for (h, q) in q.into_iter().enumerate() {
                let at = w.as_mut_ptr().add(step * STEP + h * 2 * LANES);
                _mm512_storeu_ps(at, _mm512_fmadd_ps(s, q, b));
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn dot<const R: usize>(ops: &Operands, w: &[f32], m0: usize, n: usize, out: Out) {
    let xs = x_rows::<R>(ops, m0);
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for step in 0..ops.k / STEP {
        for h in 0..2 {
            let at = step * STEP + h * 2 * LANES;
            let w = _mm512_loadu_ps(w.as_ptr().add(at));
            for (acc, x) in acc.iter_mut().zip(&xs) {
                acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(x.add(at)), w, acc[h]);
            }
        }
    }
    for (r, a) in acc.into_iter().enumerate() {
        out.write(m0 + r, n, ops.n, reduce16(a));
    }
}
