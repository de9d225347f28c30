// vmath.h: the scalar table (MLX's own width-1 code), the choice of table, and MLX's softmax
// and log-sum-exp rows over it.
#include <cmath>
#include <limits>

#include "mlx/mlx.h"
#include "mlx/backend/cpu/unary_ops.h"
#include "vmath.h"

namespace {

using namespace mlx::core;

void exp_shifted_scalar(const float* x, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    out[i] = simd::exp(simd::Simd<float, 1>(x[i] - shift)).value;
  }
}

void silu_mul_scalar(float* gate, const float* up, int64_t n) {
  detail::Sigmoid sigmoid;
  for (int64_t i = 0; i < n; i++) {
    gate[i] = (gate[i] * sigmoid(gate[i])) * up[i];
  }
}

// MLX's running maximum at width 1 (`simd::maximum`: a NaN wins, ties keep the running one).
float max_mlx(const float* x, int64_t n) {
  simd::Simd<float, 1> top(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i++) {
    top = simd::maximum(simd::Simd<float, 1>(x[i]), top);
  }
  return top.value;
}

bool max_scalar(const float* x, int64_t n, float* out) {
  *out = max_mlx(x, n);
  return true;
}

float row_max(const float* x, int64_t n) {
  float top;
  return mlxd_vmath().max(x, n, &top) ? top : max_mlx(x, n);
}

// exp(x[i] - top) into out, summed in order from 0 as MLX's width-1 loop does.
float exps_and_sum(const float* x, float top, float* out, int64_t n) {
  mlxd_vmath().exp_shifted(x, top, out, n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    sum = sum + out[i];
  }
  return sum;
}

} // namespace

const MlxdVmath& mlxd_vmath_scalar() {
  static const MlxdVmath t{exp_shifted_scalar, silu_mul_scalar, max_scalar, "scalar"};
  return t;
}

const MlxdVmath& mlxd_vmath() {
  static const MlxdVmath& chosen = [&]() -> const MlxdVmath& {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
      return mlxd_vmath_avx512();
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return mlxd_vmath_avx2();
    }
#endif
    return mlxd_vmath_scalar();
  }();
  return chosen;
}

void mlxd_softmax_row(const float* x, float* out, int64_t n) {
  const float top = row_max(x, n);
  const float scale = 1 / exps_and_sum(x, top, out, n);
  for (int64_t i = 0; i < n; i++) {
    out[i] = out[i] * scale;
  }
}

float mlxd_logsumexp_row(const float* x, float* scratch, int64_t n) {
  const float top = row_max(x, n);
  const float sum = exps_and_sum(x, top, scratch, n);
  return std::isinf(top) ? top : std::log(sum) + top;
}
