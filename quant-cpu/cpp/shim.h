// What the shim's C entry points share.
#pragma once

#include <exception>

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
