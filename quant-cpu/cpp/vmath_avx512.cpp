// vmath.h's kernels on 16 lanes of AVX-512F (compiled with -mavx512f; called only when the
// CPU has it).
#include <immintrin.h>

#include "vmath_impl.h"

namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int N = 16;

  static __mmask16 part(int64_t k) {
    return static_cast<__mmask16>((1u << k) - 1);
  }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_part(const float* p, int64_t k) { return _mm512_maskz_loadu_ps(part(k), p); }
  static V load_part_fill(const float* p, int64_t k, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), part(k), p);
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_part(float* p, V v, int64_t k) { _mm512_mask_storeu_ps(p, part(k), v); }
  static V set(float v) { return _mm512_set1_ps(v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V floor(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static V abs(V a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
  }
  static V ge_one(V a, V b) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ), _mm512_set1_ps(1.0f));
  }
  // 2^i for whole i, built in the exponent bits as MLX does: (int(i) + 127) << 23.
  static V pow2(V i) {
    __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(i), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  struct Mask {
    __mmask16 m;
  };
  static Mask is_nan(V a) { return {_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)}; }
  static Mask gt(V a, V b) { return {_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)}; }
  static Mask lt(V a, V b) { return {_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)}; }
  // Where `m`, a; elsewhere b.
  static V select(Mask m, V a, V b) { return _mm512_mask_blend_ps(m.m, b, a); }
  static V or_nan(V acc, V v) {
    return _mm512_mask_mov_ps(acc, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_ps(1.0f));
  }
  static bool any(V flags) {
    return _mm512_cmp_ps_mask(flags, _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
  }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  // Once per row: through memory (GCC 12's `_mm512_reduce_max_ps` trips its own warnings).
  static float reduce_max(V a) {
    alignas(64) float lanes[N];
    _mm512_store_ps(lanes, a);
    float top = lanes[0];
    for (int i = 1; i < N; i++) {
      top = lanes[i] > top ? lanes[i] : top;
    }
    return top;
  }
};

} // namespace

const MlxdVmath& mlxd_vmath_avx512() {
  return mlxd_vmath_impl::table<Avx512>("avx512");
}
