// Vectorized exp, sigmoid and row maxima with the bits of MLX's scalar CPU code.
//
// The libmlx we link runs its CPU SIMD at width 1 on x86-64 (`simd::exp<float, 1>`, calling
// `fmaf` as a library function), and its exp was about a sixth of a decode step: the SiLU of
// every MLP, the softmax of every attention and the log-sum-exp over the vocabulary. These
// kernels do the same operations in the same order on 16 (AVX-512) or 8 (AVX2+FMA) lanes, so
// every result has MLX's bits; the scalar table is MLX's own code, for other CPUs. Sums stay
// with the callers, in MLX's order.
#pragma once

#include <cstdint>

struct MlxdVmath {
  // out[i] = exp(x[i] - shift), as MLX's `simd::exp` of `x - shift`.
  void (*exp_shifted)(const float* x, float shift, float* out, int64_t n);
  // gate[i] = (gate[i] * sigmoid(gate[i])) * up[i], MLX's `detail::Sigmoid`.
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // The maximum of x[0..n) from -inf. A vector table answers false when the row holds a NaN
  // or the maximum is a zero (whose sign MLX's running maximum picks by order): then the
  // caller runs MLX's loop. The scalar table is that loop and always answers.
  bool (*max)(const float* x, int64_t n, float* out);
  const char* isa;
};

// The table for this CPU (AVX-512F, else AVX2+FMA, else scalar), chosen once.
const MlxdVmath& mlxd_vmath();

// The scalar table: MLX's `simd` functions at width 1 (the reference the others match).
const MlxdVmath& mlxd_vmath_scalar();

#if defined(__x86_64__)
const MlxdVmath& mlxd_vmath_avx512();
const MlxdVmath& mlxd_vmath_avx2();
#endif

// MLX's softmax of one row (`softmax<float, float>` at width 1): the maximum, exp(x - max)
// summed in order from 0, then each exp times 1 / sum.
void mlxd_softmax_row(const float* x, float* out, int64_t n);

// MLX's log-sum-exp of one row (`logsumexp<float, float>` at width 1); `scratch` holds n floats.
float mlxd_logsumexp_row(const float* x, float* scratch, int64_t n);
