// The steps the CPU nodes are made of (fast_ops.cpp's one-op nodes and decode_layer.cpp's
// whole decoder layer), written once so that both compute a step with the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mlx/array.h"

namespace mlxd {

// x [rows, d] normed over d and scaled by w [d], as MLX's `fast::rms_norm` fallback: a sum of
// squares in order from 0, times 1/d rounded to f32, plus eps, MLX's scalar rsqrt. `out` may
// be `x`.
void rms_norm_rows(const float* x, const float* w, float* out, int64_t rows, int64_t d, float eps);

struct RopeParams {
  int dims;
  bool traditional;
  float base;
  float scale;
  bool has_freqs;
};

// The inverse frequencies, as MLX's rope fallback makes them (`freqs` read when `has_freqs`).
std::vector<float> inv_freqs(const RopeParams& p, const float* freqs);

// cos and sin of each pair's angle at `position` ((t + offset) * scale), as the fallback.
void rope_angles(float position, const RopeParams& p, const float* inv, float* cos_t,
                 float* sin_t);

// One position's rotation of `heads` heads: x and out point at head 0 of that position.
struct RopeRow {
  const float* x;
  int64_t head_stride;
  int64_t dim_stride;
  float* out;
  int64_t out_head_stride;
};

void rotate_heads(const RopeRow& r, int64_t heads, int64_t d, const RopeParams& p,
                  const float* cos_t, const float* sin_t);

// One row's keys or values: `heads` heads of `len` positions of `width` floats, each position
// contiguous.
struct HeadRows {
  const float* data;
  int64_t heads;
  int64_t len;
  int64_t width;
  int64_t head_stride;
  int64_t row_stride;
};

// A [1, heads, T, width] array as `HeadRows` (gathered into `keep` when a position is not
// contiguous).
HeadRows head_rows(const mlx::core::array& a, std::vector<float>& keep);

// `positions` consecutive query positions of one row: position j's heads q + j * q_stride
// [heads, d], already scaled, its outputs out + j * out_stride [heads, dv]. The keys and values
// run through the last position; position j sees the first len - positions + j + 1 of them.
struct Attend {
  const float* q;
  HeadRows k;
  HeadRows v;
  float* out;
  int64_t positions = 1;
  int64_t q_stride = 0;
  int64_t out_stride = 0;
};

// How the query rows of one kv head go into products.
struct AttendPlan {
  // A kv head's query heads share one product.
  bool group_heads;
  // The most query rows one product takes with each row's own bits (the BLAS's few-row
  // kernel), so a row's positions share its products in chunks of this many rows.
  int64_t alone_rows;
};

// Each row's heads over its keys and values, as MLX's sdpa fallback on the CPU gives them (one
// `cblas_sgemm` per head for the scores, MLX's softmax, one for the values). A row's
// positions share the products of a head: a later position's keys are masked from an earlier
// one with the lowest float, whose softmax is an exact 0, and a product's trailing zero terms
// change no bit, so each position has the bits of a decode step of one position there. The
// (row, head group) units of every row are shared over the threads in one call, so that a
// batch's rows keep both threads busy; a few units over many keys go out in ranges of keys
// and of columns instead (where `plan.alone_rows` says the BLAS keeps every output's bits in
// any range). A unit's bits do not depend on the thread, the ranges or the other rows. Every
// row has the same kv heads.
// Every row's `positions` must be at most `positions_per_product`.
void attend_rows(const std::vector<Attend>& rows, int64_t heads, const AttendPlan& plan);

// The most positions of a row one `Attend` may take under `plan` (`repeats` query heads a kv
// head).
int64_t positions_per_product(const AttendPlan& plan, int64_t repeats);

// One sequence's causal attention: q [heads, L, d] already scaled, query i seeing keys
// 0..=i + (T - L) of its kv head; out [heads, L, dv]. As MLX's sdpa fallback with a causal
// mask on the CPU: per head one `cblas_sgemm` for the scores (M = L), masked keys set to the
// lowest float (MLX's `where`), MLX's softmax per row, one `cblas_sgemm` for the values.
void attend_causal(const float* q, int64_t len, const HeadRows& k, const HeadRows& v, float* out,
                   int64_t heads);

// The kernel's code for the dtype of scales and biases (quantized_matmul.cpp).
int32_t packed_params_code(mlx::core::Dtype d);

// Throws (naming `op`) unless w, scales and biases are one packed weight [N, ...] of K inputs
// in the format (bits, group, mode: `MlxdMode`) that the kernels take; `biases` null in a
// float mode (quantized_matmul.cpp).
void validate_packed(const char* op, int64_t k, const mlx::core::array& w,
                     const mlx::core::array& scales, const mlx::core::array* biases, int group,
                     int bits, int mode);

// Resolves the BLAS now (throws when the process has none), so a node fails when built.
void require_sgemm();

// Runs `unit(u0, u1)` over units 0..units, shared over the helper threads once the Rust side
// has set `mlxd_set_share` and `work` (multiply-adds) is worth it; else on the calling thread.
// A unit's work must not depend on which thread runs it. Rethrows a unit's exception.
void share_units(int64_t units, int64_t work, const std::function<void(int64_t, int64_t)>& unit);

} // namespace mlxd
