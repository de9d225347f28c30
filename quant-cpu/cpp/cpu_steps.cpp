// The steps of cpu_steps.h, with the bits of MLX's CPU fallbacks (see fast_ops.cpp).

#include "cpu_steps.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>

#include "mlx/backend/cpu/unary_ops.h"
#include "shim.h"
#include "vmath.h"

namespace mlxd {

using namespace mlx::core;

void rms_norm_rows(const float* x, const float* w, float* out, int64_t rows, int64_t d, float eps) {
  const float inv_d = static_cast<float>(1.0 / static_cast<double>(d));
  detail::Square square;
  detail::Rsqrt rsqrt;
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    float sum = 0.0f;
    for (int64_t i = 0; i < d; i++) {
      sum = sum + square(xr[i]);
    }
    const float scale = rsqrt((0.0f + sum) * inv_d + eps);
    for (int64_t i = 0; i < d; i++) {
      o[i] = (xr[i] * scale) * w[i];
    }
  }
}

std::vector<float> inv_freqs(const RopeParams& p, const float* freqs) {
  int half = p.dims / 2;
  std::vector<float> inv(half);
  if (p.has_freqs) {
    for (int j = 0; j < half; j++) {
      inv[j] = 1.0f / freqs[j];
    }
    return inv;
  }
  const float step = std::log(p.base) / half;
  detail::Exp exp;
  for (int j = 0; j < half; j++) {
    inv[j] = exp(static_cast<float>(-j) * step);
  }
  return inv;
}

void rope_angles(float position, const RopeParams& p, const float* inv, float* cos_t,
                 float* sin_t) {
  detail::Cos cos;
  detail::Sin sin;
  for (int j = 0; j < p.dims / 2; j++) {
    float theta = position * inv[j];
    cos_t[j] = cos(theta);
    sin_t[j] = sin(theta);
  }
}

void rotate_heads(const RopeRow& r, int64_t heads, int64_t d, const RopeParams& p,
                  const float* cos_t, const float* sin_t) {
  const int half = p.dims / 2;
  for (int64_t n = 0; n < heads; n++) {
    const float* x = r.x + n * r.head_stride;
    float* o = r.out + n * r.out_head_stride;
    for (int j = 0; j < half; j++) {
      int64_t i1 = p.traditional ? 2 * j : j;
      int64_t i2 = p.traditional ? 2 * j + 1 : j + half;
      float x1 = x[i1 * r.dim_stride], x2 = x[i2 * r.dim_stride];
      float a = x1 * cos_t[j], b = x2 * sin_t[j];
      float c = x1 * sin_t[j], e = x2 * cos_t[j];
      o[i1] = a - b;
      o[i2] = c + e;
    }
    for (int64_t i = p.dims; i < d; i++) {
      o[i] = x[i * r.dim_stride];
    }
  }
}

HeadRows head_rows(const array& a, std::vector<float>& keep) {
  const auto& st = a.strides();
  HeadRows r{nullptr, a.shape(1), a.shape(2), a.shape(3), st[1], st[2]};
  if (st[3] == 1) {
    r.data = a.data<float>();
  } else {
    r.data = mlxd_row_major(a, keep);
    r.head_stride = a.shape(2) * a.shape(3);
    r.row_stride = a.shape(3);
  }
  return r;
}

namespace {

typedef void (*Sgemm)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                      float, float*, int);

// The `cblas_sgemm` the process resolves first (the executable's, where it defines one).
Sgemm sgemm() {
  static Sgemm f = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  if (f == nullptr) {
    throw std::runtime_error("[mlxd_decode_attention] no cblas_sgemm in the process");
  }
  return f;
}

constexpr int ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112;

} // namespace

void require_sgemm() {
  sgemm();
}

namespace {

std::atomic<mlxd_share_fn> share_fn{nullptr};

// A unit range with its exception, if any: C++ must not unwind through the Rust pool.
struct Units {
  const std::function<void(int64_t, int64_t)>* unit;
  std::mutex failed_lock;
  std::exception_ptr failed;
};

void run_units(void* ctx, int64_t u0, int64_t u1) {
  auto* units = static_cast<Units*>(ctx);
  try {
    (*units->unit)(u0, u1);
  } catch (...) {
    std::lock_guard<std::mutex> lock(units->failed_lock);
    units->failed = std::current_exception();
  }
}

} // namespace

void share_units(int64_t units, int64_t work, const std::function<void(int64_t, int64_t)>& unit) {
  const mlxd_share_fn share = share_fn.load(std::memory_order_acquire);
  if (share == nullptr) {
    unit(0, units);
    return;
  }
  Units ctx{&unit, {}, nullptr};
  share(units, work, run_units, &ctx);
  if (ctx.failed) {
    std::rethrow_exception(ctx.failed);
  }
}

namespace {

// Query heads h .. h + group - 1 of one row's positions (the kv head `h / repeats`): a unit of
// the attention. Its queries are gathered as rows (position j, head r) at j * group + r; its
// scores are [rows, keys], masked and softmaxed in place; its outputs [rows, dv] are
// scattered back. Each product can be taken in column ranges (keys, or the values' columns):
// every output of the BLAS's few-row kernel has the same bits in any range.
struct Unit {
  const Attend* a;
  int64_t h;
  int group;
  int64_t repeats;
  float* q;
  float* scores;
  float* out;

  int rows() const {
    return group * static_cast<int>(a->positions);
  }
  int keys() const {
    return static_cast<int>(a->k.len);
  }
  int width() const {
    return static_cast<int>(a->k.width);
  }
  int dv() const {
    return static_cast<int>(a->v.width);
  }
  int64_t kv() const {
    return h / repeats;
  }

  void gather() const {
    const int d = width();
    for (int64_t j = 0; j < a->positions; j++) {
      std::memcpy(q + j * group * d, a->q + j * a->q_stride + h * d, group * d * sizeof(float));
    }
  }

  // Scores of keys n0..n1.
  void score(int n0, int n1) const {
    const int t = keys(), d = width();
    sgemm()(ROW_MAJOR, NO_TRANS, TRANS, rows(), n1 - n0, d, 1.0f, q, d,
            a->k.data + kv() * a->k.head_stride + n0 * a->k.row_stride,
            static_cast<int>(a->k.row_stride), 0.0f, scores + n0, t);
  }

  // Each row masked past its own keys (the lowest float, whose softmax is an exact 0) and
  // softmaxed over all.
  void softmax() const {
    const int t = keys();
    const float lowest = std::numeric_limits<float>::lowest();
    for (int r = 0; r < rows(); r++) {
      float* row = scores + static_cast<int64_t>(r) * t;
      std::fill(row + t - a->positions + r / group + 1, row + t, lowest);
      mlxd_softmax_row(row, row, t);
    }
  }

  // Output columns c0..c1, computed and scattered back.
  void values(int c0, int c1) const {
    const int t = keys(), w = dv();
    sgemm()(ROW_MAJOR, NO_TRANS, NO_TRANS, rows(), c1 - c0, t, 1.0f, scores, t,
            a->v.data + kv() * a->v.head_stride + c0, static_cast<int>(a->v.row_stride), 0.0f,
            out + c0, w);
    for (int r = 0; r < rows(); r++) {
      const int64_t j = r / group, head = h + r % group;
      std::memcpy(a->out + j * a->out_stride + head * w + c0, out + r * w + c0,
                  (c1 - c0) * sizeof(float));
    }
  }
};

// A unit's buffers, kept by each thread: they grow with the longest context, never shrink.
struct UnitScratch {
  std::vector<float> q, scores, out;

  Unit unit(const Attend& a, int64_t h, int group, int64_t repeats) {
    const size_t rows = static_cast<size_t>(group) * a.positions;
    q.resize(rows * a.k.width);
    scores.resize(rows * a.k.len);
    out.resize(rows * a.v.width);
    return {&a, h, group, repeats, q.data(), scores.data(), out.data()};
  }
};

// A unit whole, on one thread (a few hundred floats gathered and scattered against its keys'
// reads).
void attend_unit(const Unit& u) {
  u.gather();
  u.score(0, u.keys());
  u.softmax();
  u.values(0, u.dv());
}

// Below this many units a step's attention is split (see `attend_split`).
constexpr int64_t SPLIT_BELOW = 4;
// From this many keys: below, the extra round over the threads costs more than it evens out.
constexpr int64_t SPLIT_KEYS = 512;
// Key ranges a unit's scores are split into, and column ranges of its values.
constexpr int KEY_RANGES = 2, VALUE_RANGES = 2;

// Where key range r of t keys starts: whole tiles of 8 keys, the last range to t.
int range_start(int t, int r) {
  return r == KEY_RANGES ? t : (t * r / KEY_RANGES) & ~7;
}

// A few units (one row's 3 kv heads on 2 threads) leave a thread idle for a unit's time, so
// each unit's scores go out in key ranges, and its values in column ranges, over two rounds:
// the last range of a unit's scores softmaxes them. The bits are a whole unit's.
void attend_split(std::vector<Unit>& units, int64_t work) {
  std::vector<std::atomic<int>> left(units.size());
  for (size_t i = 0; i < units.size(); i++) {
    units[i].gather();
    left[i].store(KEY_RANGES, std::memory_order_relaxed);
  }
  share_units(static_cast<int64_t>(units.size()) * KEY_RANGES, work, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
      const Unit& u = units[p / KEY_RANGES];
      const int r = static_cast<int>(p % KEY_RANGES);
      const int n0 = range_start(u.keys(), r), n1 = range_start(u.keys(), r + 1);
      if (n1 > n0) {
        u.score(n0, n1);
      }
      if (left[p / KEY_RANGES].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        u.softmax();
      }
    }
  });
  share_units(static_cast<int64_t>(units.size()) * VALUE_RANGES, work, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
      const Unit& u = units[p / VALUE_RANGES];
      const int r = static_cast<int>(p % VALUE_RANGES), w = u.dv();
      u.values(w * r / VALUE_RANGES, w * (r + 1) / VALUE_RANGES);
    }
  });
}

} // namespace

int64_t positions_per_product(const AttendPlan& plan, int64_t repeats) {
  return std::max<int64_t>(1, plan.alone_rows / (plan.group_heads ? repeats : 1));
}

void attend_rows(const std::vector<Attend>& rows, int64_t heads, const AttendPlan& plan) {
  if (rows.empty()) {
    return;
  }
  const int64_t repeats = heads / rows[0].k.heads;
  int64_t work = 0, keys = std::numeric_limits<int64_t>::max();
  for (const Attend& a : rows) {
    work += heads * a.positions * a.k.len * (a.k.width + a.v.width);
    keys = std::min(keys, a.k.len);
  }
  const int group = plan.group_heads ? static_cast<int>(repeats) : 1;
  const int64_t per_row = heads / group, count = static_cast<int64_t>(rows.size()) * per_row;
  // Ranges keep a unit's bits only where the BLAS's kernel promises each output its own.
  if (count < SPLIT_BELOW && keys >= SPLIT_KEYS && plan.alone_rows > 1) {
    thread_local std::vector<UnitScratch> kept;
    kept.resize(std::max<size_t>(kept.size(), count));
    std::vector<Unit> units;
    for (int64_t u = 0; u < count; u++) {
      units.push_back(kept[u].unit(rows[u / per_row], (u % per_row) * group, group, repeats));
    }
    attend_split(units, work);
    return;
  }
  share_units(count, work, [&](int64_t u0, int64_t u1) {
    thread_local UnitScratch scratch;
    for (int64_t u = u0; u < u1; u++) {
      attend_unit(scratch.unit(rows[u / per_row], (u % per_row) * group, group, repeats));
    }
  });
}

void attend_causal(const float* q, int64_t len, const HeadRows& k, const HeadRows& v, float* out,
                   int64_t heads) {
  const int l = static_cast<int>(len), t = static_cast<int>(k.len);
  const int d = static_cast<int>(k.width), dv = static_cast<int>(v.width);
  const int64_t repeats = heads / k.heads, offset = k.len - len;
  const float lowest = std::numeric_limits<float>::lowest();
  thread_local std::vector<float> scores;
  scores.resize(static_cast<size_t>(l) * t);
  for (int64_t h = 0; h < heads; h++) {
    const int64_t g = h / repeats;
    sgemm()(ROW_MAJOR, NO_TRANS, TRANS, l, t, d, 1.0f, q + h * len * d, d,
            k.data + g * k.head_stride, static_cast<int>(k.row_stride), 0.0f, scores.data(), t);
    for (int64_t i = 0; i < len; i++) {
      float* row = scores.data() + i * t;
      std::fill(row + std::min<int64_t>(t, i + offset + 1), row + t, lowest);
      mlxd_softmax_row(row, row, t);
    }
    sgemm()(ROW_MAJOR, NO_TRANS, NO_TRANS, l, dv, t, 1.0f, scores.data(), t,
            v.data + g * v.head_stride, static_cast<int>(v.row_stride), 0.0f,
            out + h * len * dv, dv);
  }
}

} // namespace mlxd

// The Rust side's pool (set once; later calls replace it).
extern "C" void mlxd_set_share(mlxd_share_fn share) {
  mlxd::share_fn.store(share, std::memory_order_release);
}
