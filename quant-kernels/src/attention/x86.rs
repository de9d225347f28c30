//! [`Lanes`] on AVX-512 F (one register) and AVX2 with FMA (two), and the kernel's entry
//! points compiled with each set's features.

use std::arch::x86_64::*;
use std::ops::Range;

use super::kernel::{block, Task};
use super::lanes::Lanes;

/// # Safety
/// AVX-512 F, and as [`block`].
#[target_feature(enable = "avx2,fma,avx512f")]
pub(super) unsafe fn block_avx512(task: &Task, h: usize, rows: Range<usize>, s: &mut [f32]) {
    block::<Avx512>(task, h, rows, s)
}

/// # Safety
/// AVX2 and FMA, and as [`block`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn block_avx2(task: &Task, h: usize, rows: Range<usize>, s: &mut [f32]) {
    block::<Avx2>(task, h, rows, s)
}

#[derive(Clone, Copy)]
pub(super) struct Avx512(__m512);

#[inline(always)]
fn first(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

impl Lanes for Avx512 {
    const ROWS: usize = 4;
    const COLS: usize = 4;
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn splat(v: f32) -> Self {
        Avx512(_mm512_set1_ps(v))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn load(p: *const f32) -> Self {
        Avx512(_mm512_loadu_ps(p))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn load_part(p: *const f32, n: usize, fill: f32) -> Self {
        Avx512(_mm512_mask_loadu_ps(_mm512_set1_ps(fill), first(n), p))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self.0)
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn store_part(self, p: *mut f32, n: usize) {
        _mm512_mask_storeu_ps(p, first(n), self.0)
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn add(self, b: Self) -> Self {
        Avx512(_mm512_add_ps(self.0, b.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn sub(self, b: Self) -> Self {
        Avx512(_mm512_sub_ps(self.0, b.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn mul(self, b: Self) -> Self {
        Avx512(_mm512_mul_ps(self.0, b.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        Avx512(_mm512_fmadd_ps(self.0, b.0, c.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn max(self, b: Self) -> Self {
        Avx512(_mm512_max_ps(self.0, b.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn floor(self) -> Self {
        Avx512(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC },
        >(self.0))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn ge_one(self, b: Self) -> Self {
        let ge = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.0, b.0);
        Avx512(_mm512_maskz_mov_ps(ge, _mm512_set1_ps(1.0)))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn pow2(self) -> Self {
        let e = _mm512_add_epi32(_mm512_cvttps_epi32(self.0), _mm512_set1_epi32(127));
        Avx512(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(e)))
    }
    #[target_feature(enable = "avx2,fma,avx512f")]
    #[inline]
    unsafe fn exp_edges(self, v: Self) -> Self {
        let x = self.0;
        let r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), v.0, x);
        let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(88.0));
        let r = _mm512_mask_blend_ps(big, r, _mm512_set1_ps(f32::INFINITY));
        let small = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(-88.0));
        Avx512(_mm512_mask_blend_ps(small, r, _mm512_setzero_ps()))
    }
}

/// Sixteen lanes as two AVX2 registers (lanes 0-7, then 8-15).
#[derive(Clone, Copy)]
pub(super) struct Avx2([__m256; 2]);

/// The lanes below `n` of the half from lane `from`, as a mask (`n - from` clamped to 0..=8).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn half_mask(n: usize, from: usize) -> __m256i {
    let k = n.saturating_sub(from).min(8) as i32;
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(k),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn half_load(p: *const f32, n: usize, from: usize, fill: f32) -> __m256 {
    let m = half_mask(n, from);
    let v = _mm256_maskload_ps(p.add(from), m);
    _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(m))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn half_ge_one(a: __m256, b: __m256) -> __m256 {
    _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(a, b), _mm256_set1_ps(1.0))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn half_pow2(i: __m256) -> __m256 {
    let e = _mm256_add_epi32(_mm256_cvttps_epi32(i), _mm256_set1_epi32(127));
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn half_exp_edges(x: __m256, v: __m256) -> __m256 {
    let r = _mm256_blendv_ps(v, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
    let big = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(88.0));
    let r = _mm256_blendv_ps(r, _mm256_set1_ps(f32::INFINITY), big);
    let small = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-88.0));
    _mm256_blendv_ps(r, _mm256_setzero_ps(), small)
}

impl Lanes for Avx2 {
    const ROWS: usize = 2;
    const COLS: usize = 2;
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn splat(v: f32) -> Self {
        Avx2([_mm256_set1_ps(v); 2])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load(p: *const f32) -> Self {
        Avx2([_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn load_part(p: *const f32, n: usize, fill: f32) -> Self {
        Avx2([half_load(p, n, 0, fill), half_load(p, n, 8, fill)])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self.0[0]);
        _mm256_storeu_ps(p.add(8), self.0[1]);
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn store_part(self, p: *mut f32, n: usize) {
        _mm256_maskstore_ps(p, half_mask(n, 0), self.0[0]);
        _mm256_maskstore_ps(p.add(8), half_mask(n, 8), self.0[1]);
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn add(self, b: Self) -> Self {
        Avx2([
            _mm256_add_ps(self.0[0], b.0[0]),
            _mm256_add_ps(self.0[1], b.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn sub(self, b: Self) -> Self {
        Avx2([
            _mm256_sub_ps(self.0[0], b.0[0]),
            _mm256_sub_ps(self.0[1], b.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn mul(self, b: Self) -> Self {
        Avx2([
            _mm256_mul_ps(self.0[0], b.0[0]),
            _mm256_mul_ps(self.0[1], b.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        Avx2([
            _mm256_fmadd_ps(self.0[0], b.0[0], c.0[0]),
            _mm256_fmadd_ps(self.0[1], b.0[1], c.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn max(self, b: Self) -> Self {
        Avx2([
            _mm256_max_ps(self.0[0], b.0[0]),
            _mm256_max_ps(self.0[1], b.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn floor(self) -> Self {
        Avx2([_mm256_floor_ps(self.0[0]), _mm256_floor_ps(self.0[1])])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn ge_one(self, b: Self) -> Self {
        Avx2([
            half_ge_one(self.0[0], b.0[0]),
            half_ge_one(self.0[1], b.0[1]),
        ])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn pow2(self) -> Self {
        Avx2([half_pow2(self.0[0]), half_pow2(self.0[1])])
    }
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn exp_edges(self, v: Self) -> Self {
        Avx2([
            half_exp_edges(self.0[0], v.0[0]),
            half_exp_edges(self.0[1], v.0[1]),
        ])
    }
}
