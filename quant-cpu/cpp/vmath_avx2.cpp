// vmath.h's kernels on 8 lanes of AVX2 and FMA (compiled with -mavx2 -mfma; called only when
// the CPU has both).
#include <immintrin.h>

#include "vmath_impl.h"

namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int N = 8;

  static __m256i part(int64_t k) {
    return _mm256_cmpgt_epi32(
        _mm256_set1_epi32(static_cast<int>(k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_part(const float* p, int64_t k) { return _mm256_maskload_ps(p, part(k)); }
  static V load_part_fill(const float* p, int64_t k, float fill) {
    __m256i m = part(k);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_part(float* p, V v, int64_t k) { _mm256_maskstore_ps(p, part(k), v); }
  static V set(float v) { return _mm256_set1_ps(v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V floor(V a) { return _mm256_floor_ps(a); }
  static V abs(V a) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7fffffff)));
  }
  static V ge_one(V a, V b) {
    return _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ), _mm256_set1_ps(1.0f));
  }
  // 2^i for whole i, built in the exponent bits as MLX does: (int(i) + 127) << 23.
  static V pow2(V i) {
    __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(i), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  using Mask = V;
  static Mask is_nan(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static Mask gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static Mask lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  // Where `m`, a; elsewhere b.
  static V select(Mask m, V a, V b) { return _mm256_blendv_ps(b, a, m); }
  static V or_nan(V acc, V v) { return _mm256_or_ps(acc, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
  static bool any(V flags) { return _mm256_movemask_ps(flags) != 0; }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float reduce_max(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
};

} // namespace

const MlxdVmath& mlxd_vmath_avx2() {
  return mlxd_vmath_impl::table<Avx2>("avx2");
}
