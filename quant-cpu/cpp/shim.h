// What the shim's C entry points share.
#pragma once

#include <exception>
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
