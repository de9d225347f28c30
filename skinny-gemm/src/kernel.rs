//! The AVX2/FMA kernel: tiles of up to 8 activation rows by one weight row (or one row by 4
//! weight rows, or on rows of at most [`SHORT_K`] values, such as attention's keys, two rows by
//! 4 and a last row by 8), each output an 8-lane FMA accumulation over k, one fixed horizontal
//! sum, then a scalar tail; `A B` products (attention's values) three rows by 32 columns, or a
//! row by up to 64. Every tile gives an output the same bits.

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

/// Weight rows a tile of the short-row path takes at once (attention's keys): their eight
/// sums reduce together ([`hsum8`]).
const KEYS: usize = 8;

/// The longest rows the short-row path takes: a tile's weight rows stay in L1 while each
/// activation row reads them. Longer ones take [`rows`], which streams each weight row once.
const SHORT_K: usize = 256;

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
        let mut n = n0;
        while g.k <= SHORT_K && n + KEYS <= n1 {
            short_rows(g, n);
            n += KEYS;
        }
        for n in n..n1 {
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

/// Every activation row against the `KEYS` short weight rows from `n` (in L1 while the rows
/// read them): rows two at a time against half the keys, then a last odd row against all.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn short_rows(g: &Gemm, n: usize) {
    let mut m = 0;
    while m + 2 <= g.m {
        pair_keys(g, m, n);
        pair_keys(g, m, n + KEYS / 2);
        m += 2;
    }
    if m < g.m {
        keys(g, m, n);
    }
}

/// Activation rows `m` and `m + 1` against the 4 weight rows from `n`: eight chains, each
/// output's 8-lane chain and [`hsum`]'s order (through [`hsum8`]), then the scalar tail. Two
/// rows share each weight load, so the loads no longer outnumber the multiply-adds.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn pair_keys(g: &Gemm, m: usize, n: usize) {
    let k8 = g.k / 8 * 8;
    let a = |i: usize| g.a.add((m + i) * g.lda);
    let b = |j: usize| g.b.add((n + j) * g.ldb);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut k = 0;
    while k < k8 {
        let w = [0, 1, 2, 3].map(|j| _mm256_loadu_ps(b(j).add(k)));
        for i in 0..2 {
            let x = _mm256_loadu_ps(a(i).add(k));
            for j in 0..4 {
                acc[4 * i + j] = _mm256_fmadd_ps(x, w[j], acc[4 * i + j]);
            }
        }
        k += 8;
    }
    for (o, mut s) in hsum8(&acc).into_iter().enumerate() {
        let (i, j) = (o / 4, o % 4);
        for k in k8..g.k {
            s = (*a(i).add(k)).mul_add(*b(j).add(k), s);
        }
        store(g, m + i, n + j, s);
    }
}

/// Activation row `m` against the `KEYS` weight rows from `n`: each output the 8-lane chain
/// and [`hsum`]'s order of [`tile`], the eight sums reduced together, then the scalar tail.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn keys(g: &Gemm, m: usize, n: usize) {
    let k8 = g.k / 8 * 8;
    let a = g.a.add(m * g.lda);
    let b = |j: usize| g.b.add((n + j) * g.ldb);
    let mut acc = [_mm256_setzero_ps(); KEYS];
    // Key by key, so that the loads walk the keys' memory in order.
    for (j, acc) in acc.iter_mut().enumerate() {
        let mut k = 0;
        while k < k8 {
            *acc = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.add(k)),
                _mm256_loadu_ps(b(j).add(k)),
                *acc,
            );
            k += 8;
        }
    }
    for (j, mut s) in hsum8(&acc).into_iter().enumerate() {
        for k in k8..g.k {
            s = (*a.add(k)).mul_add(*b(j).add(k), s);
        }
        store(g, m, n + j, s);
    }
}

/// `A B` with `B` [k, n]: each output is one FMA chain over k in order, so zero terms at
/// the end (a masked, padded attention row) leave it bit-identical. Three rows take 32
/// columns a tile ([`rows_nn`]); a row alone takes 64 columns a pass (a head of values), so
/// that the pass reads each row of `B` whole and in order: two passes of 32 read the same rows
/// from memory in halves.
#[target_feature(enable = "avx2,fma")]
unsafe fn columns_nn(g: &Gemm, n0: usize, n1: usize) {
    let mut m = 0;
    // Three rows at a time over 32 columns: each load of `B` feeds three chains.
    while m + 3 <= g.m {
        let mut n = n0;
        while n + 32 <= n1 {
            rows_nn(g, m, n);
            n += 32;
        }
        for m in m..m + 3 {
            row_nn(g, m, n, n1);
        }
        m += 3;
    }
    for m in m..g.m {
        row_nn(g, m, n0, n1);
    }
}

/// Rows `m..m + 3` of `A` against the 32 columns of `B` from `n`: twelve chains, each one
/// output group's chain of [`chunk_nn`].
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn rows_nn(g: &Gemm, m: usize, n: usize) {
    let a = |i: usize| g.a.add((m + i) * g.lda);
    let mut acc = [[_mm256_setzero_ps(); 4]; 3];
    for k in 0..g.k {
        let x = [0, 1, 2].map(|i| _mm256_set1_ps(*a(i).add(k)));
        let row = g.b.add(k * g.ldb + n);
        for v in 0..4 {
            let w = _mm256_loadu_ps(row.add(8 * v));
            for (acc, x) in acc.iter_mut().zip(x) {
                acc[v] = _mm256_fmadd_ps(x, w, acc[v]);
            }
        }
    }
    let mut out = [0.0f32; 8];
    for (i, acc) in acc.iter().enumerate() {
        for (v, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr(), *acc);
            for (j, s) in out.iter().enumerate() {
                store(g, m + i, n + 8 * v + j, *s);
            }
        }
    }
}

/// Row `m` of `A` against the columns `n0..n1` of `B`.
#[target_feature(enable = "avx2,fma")]
unsafe fn row_nn(g: &Gemm, m: usize, n0: usize, n1: usize) {
    let a = g.a.add(m * g.lda);
    let mut n = n0;
    while n + 64 <= n1 {
        chunk_nn::<8>(g, a, m, n);
        n += 64;
    }
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

/// [`hsum`] of each of eight vectors, the same additions of the same pairs, done side by side:
/// lanes `l` and `l + 4`, then lanes 0 + 2 and 1 + 3 of those, then the two.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn hsum8(v: &[__m256; 8]) -> [f32; 8] {
    // [s4(v[i]), s4(v[i + 1])]: each 128-bit half one vector's lanes l + (l + 4).
    let s4 = |i: usize| {
        let lo = _mm256_permute2f128_ps(v[i], v[i + 1], 0x20);
        let hi = _mm256_permute2f128_ps(v[i], v[i + 1], 0x31);
        _mm256_add_ps(lo, hi)
    };
    // Halves: [s2(v[i]), s2(v[i + 2])] and [s2(v[i + 1]), s2(v[i + 3])].
    let s2 = |p: __m256, q: __m256| {
        let even = _mm256_shuffle_ps(p, q, 0b01_00_01_00);
        let odd = _mm256_shuffle_ps(p, q, 0b11_10_11_10);
        _mm256_add_ps(even, odd)
    };
    let (t0, t1) = (s2(s4(0), s4(2)), s2(s4(4), s4(6)));
    let even = _mm256_shuffle_ps(t0, t1, 0b10_00_10_00);
    let odd = _mm256_shuffle_ps(t0, t1, 0b11_01_11_01);
    // Halves: [v0, v2, v4, v6] and [v1, v3, v5, v7].
    let mut r = [0.0f32; 8];
    _mm256_storeu_ps(r.as_mut_ptr(), _mm256_add_ps(even, odd));
    [r[0], r[4], r[1], r[5], r[2], r[6], r[3], r[7]]
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

    /// Every output of `x W^T` on each shape (m, n, k) and beta 0 and 1, handed to `check`
    /// with its row of A, its row of B, the beta and what the kernel gave.
    fn each_output(
        shapes: &[(usize, usize, usize)],
        seed: u32,
        check: impl Fn(&[f32], &[f32], f32, f32, &str),
    ) {
        for &(m, n, k) in shapes {
            let (a, b) = (matrix(m, k, seed), matrix(n, k, seed + 1));
            for beta in [0.0, 1.0] {
                let c = product(m, n, k, &a, &b, beta);
                for i in 0..m {
                    for j in 0..n {
                        let (x, w) = (&a[i * k..][..k], &b[j * k..][..k]);
                        check(x, w, beta, c[i * n + j], &format!("{m}x{n}x{k} ({i}, {j})"));
                    }
                }
            }
        }
    }

    #[test]
    fn matches_a_double_precision_reference() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return;
        }
        let shapes = [
            (1, 7, 5),
            (2, 9, 19),
            (3, 4, 64),
            (5, 13, 100),
            (16, 33, 576),
        ];
        each_output(&shapes, 1, |x, w, beta, got, at| {
            let want: f64 = x
                .iter()
                .zip(w)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>()
                + beta as f64 * 0.5;
            let got = got as f64;
            assert!((got - want).abs() < 1e-4 * (1.0 + want.abs()), "{at}");
        });
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

    /// One output of `x W^T` as the kernel defines it: 8 lanes' FMA chains over k, [`hsum`]'s
    /// order, the scalar tail, then `alpha · s + beta · c` (alpha 1).
    fn nt_reference(a: &[f32], b: &[f32], beta: f32) -> f32 {
        let k8 = a.len() / 8 * 8;
        let mut l = [0.0f32; 8];
        for k in (0..k8).step_by(8) {
            for (i, l) in l.iter_mut().enumerate() {
                *l = a[k + i].mul_add(b[k + i], *l);
            }
        }
        let mut s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        for k in k8..a.len() {
            s = a[k].mul_add(b[k], s);
        }
        match beta == 0.0 {
            true => s,
            false => s + beta * 0.5,
        }
    }

    #[test]
    fn every_output_has_the_defined_bits() {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return;
        }
        // Short rows (attention's keys, eight at a time) and long ones, 1 to 16 rows.
        let shapes = [
            (3, 41, 64),
            (2, 8, 61),
            (7, 19, 256),
            (16, 17, 128),
            (4, 9, 300),
        ];
        each_output(&shapes, 7, |x, w, beta, got, at| {
            assert_eq!(got.to_bits(), nt_reference(x, w, beta).to_bits(), "{at}");
        });
        // `A B` ([k, n] values): one FMA chain over k per output.
        for (m, n, k) in [(1, 64, 37), (3, 64, 230), (4, 45, 9), (7, 100, 16)] {
            let (a, b) = (matrix(m, k, 9), matrix(k, n, 10));
            let c = product_with(m, n, k, &a, &b, 0.0, false);
            for i in 0..m {
                for j in 0..n {
                    let want = (0..k).fold(0.0f32, |s, t| a[i * k + t].mul_add(b[t * n + j], s));
                    assert_eq!(
                        c[i * n + j].to_bits(),
                        want.to_bits(),
                        "{m}x{n}x{k} ({i}, {j})"
                    );
                }
            }
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
