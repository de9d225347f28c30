// The vector kernels of vmath.h, written once over an instruction set's lanes `I` (vmath_avx512.cpp
// and vmath_avx2.cpp each compile them with their own target flags). Every step is the one
// MLX's `simd::exp<float, 1>` takes, rounded the same way (see `exp`).
#pragma once

#include <cmath>
#include <cstdint>

#include "vmath.h"

namespace mlxd_vmath_impl {

// MLX's exp (mlx/backend/cpu/simd/math.h): y = x*log2(e) split as 2^round(y) * p(y - round(y)).
// MLX rounds with floor(y + 0.5) in double, exact for the |x| <= 88 it keeps; the float form
// floor(y) + (y - floor(y) >= 0.5) decides the same (the subtraction rounds monotonically
// and 0.5 is a float), and outside that range the result is replaced anyway.
template <class I>
typename I::V exp(typename I::V x_init) {
  using V = typename I::V;
  V x = I::mul(x_init, I::set(1.442695f));
  V whole = I::floor(x);
  V ipart = I::add(whole, I::ge_one(I::sub(x, whole), I::set(0.5f)));
  V fpart = I::sub(x, ipart);
  x = I::set(1.535336188319500e-4f);
  x = I::fma(x, fpart, I::set(1.339887440266574e-3f));
  x = I::fma(x, fpart, I::set(9.618437357674640e-3f));
  x = I::fma(x, fpart, I::set(5.550332471162809e-2f));
  x = I::fma(x, fpart, I::set(2.402264791363012e-1f));
  x = I::fma(x, fpart, I::set(6.931472028550421e-1f));
  x = I::fma(x, fpart, I::set(1.000000000000000f));
  V result = I::mul(I::pow2(ipart), x);
  result = I::select(I::is_nan(x_init), x_init, result);
  result = I::select(I::gt(x_init, I::set(88.0f)), I::set(INFINITY), result);
  return I::select(I::lt(x_init, I::set(-88.0f)), I::set(0.0f), result);
}

template <class I>
void exp_shifted(const float* x, float shift, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + I::N <= n; i += I::N) {
    I::store(out + i, exp<I>(I::sub(I::load(x + i), I::set(shift))));
  }
  if (i < n) {
    I::store_part(out + i, exp<I>(I::sub(I::load_part(x + i, n - i), I::set(shift))), n - i);
  }
}

// MLX's `detail::Sigmoid`: y = 1 / (1 + exp(|g|)), then y for g < 0 and 1 - y otherwise.
template <class I>
typename I::V silu_times(typename I::V g, typename I::V up) {
  typename I::V y = I::div(I::set(1.0f), I::add(I::set(1.0f), exp<I>(I::abs(g))));
  typename I::V sigmoid = I::select(I::lt(g, I::set(0.0f)), y, I::sub(I::set(1.0f), y));
  return I::mul(I::mul(g, sigmoid), up);
}

template <class I>
void silu_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + I::N <= n; i += I::N) {
    I::store(gate + i, silu_times<I>(I::load(gate + i), I::load(up + i)));
  }
  if (i < n) {
    auto g = I::load_part(gate + i, n - i);
    I::store_part(gate + i, silu_times<I>(g, I::load_part(up + i, n - i)), n - i);
  }
}

template <class I>
bool max(const float* x, int64_t n, float* out) {
  using V = typename I::V;
  V top = I::set(-INFINITY);
  V nan = I::set(0.0f);
  int64_t i = 0;
  for (; i + I::N <= n; i += I::N) {
    V v = I::load(x + i);
    nan = I::or_nan(nan, v);
    top = I::max(top, v);
  }
  if (i < n) {
    V v = I::load_part_fill(x + i, n - i, -INFINITY);
    nan = I::or_nan(nan, v);
    top = I::max(top, v);
  }
  *out = I::reduce_max(top);
  return !I::any(nan) && *out != 0.0f;
}

template <class I>
const MlxdVmath& table(const char* isa) {
  static const MlxdVmath t{exp_shifted<I>, silu_mul<I>, max<I>, isa};
  return t;
}

} // namespace mlxd_vmath_impl
