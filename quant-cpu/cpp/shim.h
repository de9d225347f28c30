// What the shim's C entry points share.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mlx/array.h"
#include "mlx/backend/common/utils.h"
#include "mlx/c/error.h"

// Runs `build` and returns mlx-c's status: 0, or 1 after handing a C++ exception's text to
// mlx-c's error handler (it reaches Rust as an `Exception`), as mlx-c's own calls do.
template <typename F>
int mlxd_guarded(F&& build) {
  try {
    build();
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 1;
  }
  return 0;
}

// Throws `invalid_argument` "[op] what" unless `ok`. `what` is a string, or a callable that
// makes it: messages naming shapes are built only when a check fails (a decode step checks
// hundreds of operands).
template <typename F>
void mlxd_check(bool ok, const char* op, F&& what) {
  if (ok) {
    return;
  }
  if constexpr (std::is_invocable_v<F>) {
    throw std::invalid_argument(std::string("[") + op + "] " + std::string(what()));
  } else {
    throw std::invalid_argument(std::string("[") + op + "] " + std::string(what));
  }
}

// `a`'s f32 elements in row-major order: `a`'s own data when it is row-contiguous, else a copy
// gathered into `keep` (a strided or broadcast view; rare, so not worth a node per use).
inline const float* mlxd_row_major(const mlx::core::array& a, std::vector<float>& keep) {
  if (a.flags().row_contiguous) {
    return a.data<float>();
  }
  keep.resize(a.size());
  const float* src = a.data<float>();
  for (size_t i = 0; i < keep.size(); i++) {
    keep[i] = src[mlx::core::elem_to_loc(static_cast<int>(i), a.shape(), a.strides())];
  }
  return keep.data();
}

// The kernel, passed in by the Rust side (so no symbol has to cross the link in reverse).
// Scales and biases share one dtype, `params`: 0 float32, 1 bfloat16, 2 float16, 3 uint8 (a
// float mode's scale bytes, `biases` null). `mode`: 0 affine, 1 mxfp4, 2 mxfp8, 3 nvfp4.
typedef void (*mlxd_qmm_kernel)(
    const float* x,
    int64_t m,
    int64_t k,
    const uint8_t* w,
    const void* scales,
    const void* biases,
    int32_t params,
    int64_t n,
    int32_t bits,
    int32_t group,
    int32_t mode,
    float* out);

// One part of a product of several sharing x (a layer's q, k and v): a packed weight of `n`
// rows (scales and biases as for `mlxd_qmm_kernel`) and its output, room for m * n floats.
struct MlxdPart {
  const uint8_t* w;
  const void* scales;
  const void* biases;
  int64_t n;
  float* out;
};

// The products of x [m, k] by `count` parts of one format, each output with the bits its own
// product would give: x is made ready once and the parts' columns shared out as one product.
typedef void (*mlxd_qmm_parts_kernel)(
    const float* x,
    int64_t m,
    int64_t k,
    const MlxdPart* parts,
    int32_t count,
    int32_t params,
    int32_t bits,
    int32_t group,
    int32_t mode);

// Runs `unit(ctx, u0, u1)` over units 0..units, in chunks shared over the process's helper
// threads (skinny-gemm's pool) when `work` (multiply-adds) is worth it, else on the caller;
// returns when every unit is done. Passed in by the Rust side (`mlxd_set_share`).
typedef void (*mlxd_units_fn)(void* ctx, int64_t u0, int64_t u1);
typedef void (*mlxd_share_fn)(int64_t units, int64_t work, mlxd_units_fn unit, void* ctx);

// The quantization modes, as the kernel's `mode` argument numbers them.
enum MlxdMode : int32_t { MLXD_AFFINE = 0, MLXD_MXFP4 = 1, MLXD_MXFP8 = 2, MLXD_NVFP4 = 3 };
