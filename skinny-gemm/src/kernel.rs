//! The AVX2/FMA kernel: tiles of up to 8 activation rows by one weight row (or one row by 4
//! weight rows), each output an 8-lane FMA accumulation over k, one fixed horizontal sum, then
//! a scalar tail.

use std::arch::x86_64::*;

/// Most activation rows a product may have to take the kernel (a decode batch, or a short
/// prompt chunk); above it, sgemm's packing pays for itself.
pub(crate) const MAX_ROWS: usize = 16;

/// One product `C = alpha * A op(B) + beta * C`: `A` [m, k] (row stride `lda`), `B` [n, k]
/// when `b_trans` (a weight, `x W^T`) or else [k, n] (attention's values), with row stride
/// `ldb`, and `C` [m, n] (row stride `ldc`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub a: *const f32,
    pub lda: usize,
    pub b: *const f32,
    pub ldb: usize,
    pub b_trans: bool,
    pub beta: f32,
    pub c: *mut f32,
    pub ldc: usize,
}

// Threads write disjoint column ranges of `C` and only read `A` and `B`.
unsafe impl Send for Gemm {}
unsafe impl Sync for Gemm {}

/// Weight rows per tile of a single activation row.
const NT: usize = 4;

/// Computes the columns `n0..n1` of `g` (every row).
///
/// # Safety
/// The pointers must cover the described matrices, `C` must not overlap `A` or `B`, and the
/// CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn columns(g: &Gemm, n0: usize, n1: usize) {
    if !g.b_trans {
        return columns_nn(g, n0, n1);
    }
    if g.m > 1 {
        for n in n0..n1 {
            rows(g, n);
        }
        return;
    }
    // One row: four weight rows at a time keep four FMA chains in flight.
    let mut n = n0;
    while n + NT <= n1 {
        tile::<1, NT>(g, 0, n);
        n += NT;
    }
    while n < n1 {
        tile::<1, 1>(g, 0, n);
        n += 1;
    }
}

/// Every activation row against weight row `n`, eight at a time: the weight streams from
/// memory once while the rows (small, cached) are reread, and no pass leaves memory idle.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows(g: &Gemm, n: usize) {
    let mut m = 0;
    while m < g.m {
        match g.m - m {
            1 => tile::<1, 1>(g, m, n),
            2 => tile::<2, 1>(g, m, n),
            3 => tile::<3, 1>(g, m, n),
            4 => tile::<4, 1>(g, m, n),
            5 => tile::<5, 1>(g, m, n),
            6 => tile::<6, 1>(g, m, n),
            7 => tile::<7, 1>(g, m, n),
            _ => tile::<8, 1>(g, m, n),
        }
        m += 8;
    }
}

/// `R` activation rows from `m` by `W` weight rows from `n`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize, const W: usize>(g: &Gemm, m: usize, n: usize) {
    let k8 = g.k / 8 * 8;
    let a = |i: usize| g.a.add((m + i) * g.lda);
    let b = |j: usize| g.b.add((n + j) * g.ldb);
    let mut acc = [[_mm256_setzero_ps(); W]; R];
    let mut k = 0;
    while k < k8 {
        let mut w = [_mm256_setzero_ps(); W];
        for (j, w) in w.iter_mut().enumerate() {
            *w = _mm256_loadu_ps(b(j).add(k));
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_loadu_ps(a(i).add(k));
            for j in 0..W {
                acc[j] = _mm256_fmadd_ps(x, w[j], acc[j]);
            }
        }
        k += 8;
    }
    for (i, acc) in acc.iter().enumerate() {
        for (j, acc) in acc.iter().enumerate() {
            let mut s = hsum(*acc);
            for k in k8..g.k {
                s = (*a(i).add(k)).mul_add(*b(j).add(k), s);
            }
            store(g, m + i, n + j, s);
        }
    }
}

/// `A B` with `B` [k, n]: each output is one FMA chain over k in order, so zero terms at
/// the end (a masked, padded attention row) leave it bit-identical.
#[target_feature(enable = "avx2,fma")]
unsafe fn columns_nn(g: &Gemm, n0: usize, n1: usize) {
    for m in 0..g.m {
        let a = g.a.add(m * g.lda);
        let mut n = n0;
        while n + 32 <= n1 {
            chunk_nn::<4>(g, a, m, n);
            n += 32;
        }
        while n + 8 <= n1 {
            chunk_nn::<1>(g, a, m, n);
            n += 8;
        }
        for n in n..n1 {
            let mut s = 0.0f32;
            for k in 0..g.k {
                s = (*a.add(k)).mul_add(*g.b.add(k * g.ldb + n), s);
            }
            store(g, m, n, s);
        }
    }
}

/// Row `m` of `A` against `V` groups of 8 columns of `B` from `n`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn chunk_nn<const V: usize>(g: &Gemm, a: *const f32, m: usize, n: usize) {
    let mut acc = [_mm256_setzero_ps(); V];
    for k in 0..g.k {
        let x = _mm256_set1_ps(*a.add(k));
        let row = g.b.add(k * g.ldb + n);
        for (v, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(row.add(8 * v)), *acc);
        }
    }
    let mut out = [0.0f32; 8];
    for (v, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr(), *acc);
        for (j, s) in out.iter().enumerate() {
            store(g, m, n + 8 * v + j, *s);
        }
    }
}

/// `C[m, n] = alpha * s + beta * C[m, n]` (C is not read when beta is 0).
#[inline]
unsafe fn store(g: &Gemm, m: usize, n: usize, s: f32) {
    let c = g.c.add(m * g.ldc + n);
    *c = match g.beta == 0.0 {
        true => g.alpha * s,
        false => g.alpha * s + g.beta * *c,
    };
}

/// The lanes' sum, always in the same order: (0+4, 1+5, 2+6, 3+7), then pairs, then the two.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random matrix.
    fn matrix(rows: usize, cols: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..rows * cols)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn product(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], beta: f32) -> Vec<f32> {
        product_with(m, n, k, a, b, beta, true)
    }

    fn product_with(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        b: &[f32],
        beta: f32,
        b_trans: bool,
    ) -> Vec<f32> {
        let mut c = vec![0.5; m * n];
        let g = Gemm {
            m,
            n,
            k,
            alpha: 1.0,
            a: a.as_ptr(),
            lda: k,
            b: b.as_ptr(),
            ldb: if b_trans { k } else { n },
            b_trans,
            beta,
            c: c.as_mut_ptr(),
            ldc: n,
        };
        unsafe { columns(&g, 0, n) };
        c
    }

    #[test]
    fn matches_a_double_precision_reference() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return;
        }
        for (m, n, k) in [
            (1, 7, 5),
            (2, 9, 19),
            (3, 4, 64),
            (5, 13, 100),
            (16, 33, 576),
        ] {
            let (a, b) = (matrix(m, k, 1), matrix(n, k, 2));
            for beta in [0.0, 1.0] {
                let c = product(m, n, k, &a, &b, beta);
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|t| a[i * k + t] as f64 * b[j * k + t] as f64)
                            .sum::<f64>()
                            + beta as f64 * 0.5;
                        let got = c[i * n + j] as f64;
                        assert!(
                            (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                            "{m}x{n}x{k}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_is_the_same_bits_in_any_batch() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return;
        }
        let (n, k) = (37, 203);
        let (a, b) = (matrix(MAX_ROWS, k, 3), matrix(n, k, 4));
        let batch = product(MAX_ROWS, n, k, &a, &b, 0.0);
        for m in 0..MAX_ROWS {
            let alone = product(1, n, k, &a[m * k..(m + 1) * k], &b, 0.0);
            assert_eq!(alone, batch[m * n..(m + 1) * n], "row {m}");
        }
    }

    #[test]
    fn zero_terms_at_the_end_change_no_bit() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return;
        }
        // A padded attention row: probabilities [m, k] with zeros past k, values [k + pad, n].
        let (m, n, k, pad) = (3, 64, 37, 219);
        let (a, b) = (matrix(m, k, 5), matrix(k + pad, n, 6));
        let mut padded = vec![0.0; m * (k + pad)];
        for i in 0..m {
            padded[i * (k + pad)..i * (k + pad) + k].copy_from_slice(&a[i * k..(i + 1) * k]);
        }
        let want = product_with(m, n, k, &a, &b[..k * n], 0.0, false);
        let got = product_with(m, n, k + pad, &padded, &b, 0.0, false);
        assert_eq!(want, got);
    }
}
