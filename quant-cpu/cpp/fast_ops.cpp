// MLX's `fast::rms_norm` and `fast::rope` as one node each on the CPU.
//
// MLX has no CPU kernels for its fast ops: on the CPU each call becomes the fallback graph of
// plain ops (about 10 nodes for an RMS norm and 30 for a rope, counted in a decode step), and a
// decode step of a small model is bound by the cost of a node, not by arithmetic. These nodes
// compute exactly what those fallbacks compute, in the same order and with MLX's own scalar
// functions (`detail::Rsqrt`, `Exp`, `Sin`, `Cos` from the headers of the libmlx we link, whose
// CPU SIMD width is 1 on x86-64 Linux), so every output has the fallback's bits; the tests
// compare them bit for bit. f32 only: other dtypes keep MLX's own path.

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/backend/cpu/unary_ops.h"
#include "mlx/c/error.h"
#include "mlx/c/private/mlx.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "mlx/backend/common/utils.h"
#include "cpu_steps.h"
#include "shim.h"
#include "vmath.h"

namespace {

using namespace mlx::core;
using mlxd::HeadRows;
using mlxd::RopeParams;
using mlxd::RopeRow;

// What both nodes share: CPU only, f32 in and out.
class FastCpu : public Primitive {
 public:
  explicit FastCpu(Stream stream) : Primitive(stream) {}

  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error(
        std::string("[") + name() + "] runs on the CPU only; on Metal MLX's own fast ops are used");
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    return {inputs[0].shape()};
  }
};

// Allocates the node's output and registers its arrays with the stream's encoder, which the
// caller then hands the work to.
cpu::CommandEncoder& encode(Stream stream, const std::vector<array>& inputs, array& out) {
  out.set_data(allocator::malloc(out.nbytes()));
  auto& encoder = cpu::get_command_encoder(stream);
  for (auto& in : inputs) {
    encoder.set_input_array(in);
  }
  encoder.set_output_array(out);
  return encoder;
}

// ---------------------------------------------------------------------------------------------
// RMS norm: MLX's fallback is x * rsqrt(mean(square(x), -1) + eps), times the weight. `mean` is
// a sum (one accumulator, in order, from 0) times 1/D rounded to f32.

class RmsNormCpu : public FastCpu {
 public:
  RmsNormCpu(Stream stream, float eps) : FastCpu(stream), eps_(eps) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdRmsNorm";
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const RmsNormCpu&>(other);
    return std::string(name()) == o.name() && eps_ == o.eps_;
  }

 private:
  float eps_;
};

void RmsNormCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& out = outputs[0];
  auto& encoder = encode(stream(), inputs, out);
  int64_t d = inputs[0].shape(-1);
  int64_t rows = d == 0 ? 0 : static_cast<int64_t>(inputs[0].size()) / d;
  encoder.dispatch([x = array::unsafe_weak_copy(inputs[0]),
                    w = array::unsafe_weak_copy(inputs[1]),
                    out = array::unsafe_weak_copy(out),
                    rows,
                    d,
                    eps = eps_]() mutable {
    std::vector<float> keep_x, keep_w;
    mlxd::rms_norm_rows(
        mlxd_row_major(x, keep_x), mlxd_row_major(w, keep_w), out.data<float>(), rows, d, eps);
  });
}

array rms_norm_cpu(const array& x, const array& weight, float eps, Stream s) {
  if (x.dtype() != float32 || weight.dtype() != float32) {
    throw std::invalid_argument("[mlxd_rms_norm] x and the weight must be float32");
  }
  if (x.ndim() == 0 || weight.ndim() != 1 || weight.shape(0) != x.shape(-1)) {
    std::ostringstream msg;
    msg << "[mlxd_rms_norm] the weight " << weight.shape() << " must be [D] for x "
        << x.shape();
    throw std::invalid_argument(msg.str());
  }
  return array(x.shape(), float32, std::make_shared<RmsNormCpu>(s, eps), {x, weight});
}

// ---------------------------------------------------------------------------------------------
// RoPE: MLX's fallback rotates pairs (x1, x2) by theta = ((t + offset) * scale) * inv_freq[j],
// inv_freq = exp(-j * (log(base) / (dims/2))) or 1 / freqs[j]; x1 * cos - x2 * sin and
// x1 * sin + x2 * cos, each product rounded; dims past `dims` pass through.


class RopeCpu : public FastCpu {
 public:
  RopeCpu(Stream stream, RopeParams p) : FastCpu(stream), p_(p) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdRope";
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const RopeCpu&>(other);
    return std::string(name()) == o.name() && p_.dims == o.p_.dims &&
        p_.traditional == o.p_.traditional && p_.base == o.p_.base &&
        p_.scale == o.p_.scale && p_.has_freqs == o.p_.has_freqs;
  }

 private:
  RopeParams p_;
};

// Each position's cos and sin for one set of rope parameters, kept by the stream thread: every
// layer's q and k take the same angles, which MLX's scalar sincos made a prompt's largest
// serial step after the products. Values computed as `rope_angles` computes them.
struct AngleTable {
  RopeParams p;
  std::vector<float> inv;
  std::vector<float> cos_t, sin_t; // [position][dims / 2]
};

// Positions a table keeps (8 MB at dims 128): past them, angles are computed each time.
constexpr int64_t TABLE_POSITIONS = 32768;

bool same_rope(const AngleTable& t, const RopeParams& p, const std::vector<float>& inv) {
  return t.p.dims == p.dims && t.p.traditional == p.traditional && t.p.base == p.base &&
         t.p.scale == p.scale && t.p.has_freqs == p.has_freqs && t.inv == inv;
}

// The table for `p` and `inv`, holding at least positions 0..`upto` (upto <= TABLE_POSITIONS).
const AngleTable& angle_table(const RopeParams& p, const std::vector<float>& inv, int64_t upto) {
  thread_local std::vector<AngleTable> tables;
  AngleTable* t = nullptr;
  for (auto& candidate : tables) {
    t = same_rope(candidate, p, inv) ? &candidate : t;
  }
  if (t == nullptr) {
    if (tables.size() >= 4) {
      tables.erase(tables.begin());
    }
    tables.push_back(AngleTable{p, inv, {}, {}});
    t = &tables.back();
  }
  const int64_t half = p.dims / 2, held = static_cast<int64_t>(t->cos_t.size()) / half;
  if (held < upto) {
    t->cos_t.resize(upto * half);
    t->sin_t.resize(upto * half);
    for (int64_t pos = held; pos < upto; pos++) {
      const float position = (static_cast<float>(pos) + 0.0f) * p.scale;
      mlxd::rope_angles(position, p, inv.data(), &t->cos_t[pos * half], &t->sin_t[pos * half]);
    }
  }
  return *t;
}

void rope_eval(const array& x, const array& offsets, const float* freqs, array& out,
               const RopeParams& p) {
  const int64_t B = x.shape(0), N = x.shape(1), T = x.shape(2), D = x.shape(3);
  const auto& st = x.strides();
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const int32_t* off = offsets.data<int32_t>();
  const bool per_row = offsets.size() > 1;
  const std::vector<float> inv = mlxd::inv_freqs(p, freqs);
  const int half = p.dims / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t b = 0; b < B; b++) {
    const int32_t offset = off[per_row ? b * offsets.strides(0) : 0];
    const int64_t end = static_cast<int64_t>(offset) + T;
    const bool tabled = T > 1 && offset >= 0 && end <= TABLE_POSITIONS;
    const AngleTable* table = tabled ? &angle_table(p, inv, end) : nullptr;
    for (int64_t t = 0; t < T; t++) {
      const float* c = cos_t.data();
      const float* s = sin_t.data();
      if (table != nullptr) {
        c = &table->cos_t[(offset + t) * half];
        s = &table->sin_t[(offset + t) * half];
      } else {
        const float position = (static_cast<float>(t) + static_cast<float>(offset)) * p.scale;
        mlxd::rope_angles(position, p, inv.data(), cos_t.data(), sin_t.data());
      }
      RopeRow row{
          xp + b * st[0] + t * st[2], st[1], st[3], op + ((b * N) * T + t) * D, T * D};
      mlxd::rotate_heads(row, N, D, p, c, s);
    }
  }
}

void RopeCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& out = outputs[0];
  auto& encoder = encode(stream(), inputs, out);
  encoder.dispatch([x = array::unsafe_weak_copy(inputs[0]),
                    offsets = array::unsafe_weak_copy(inputs[1]),
                    freqs = p_.has_freqs ? array::unsafe_weak_copy(inputs[2]) : array(0.0f),
                    out = array::unsafe_weak_copy(out),
                    p = p_]() mutable {
    std::vector<float> keep;
    const float* f = p.has_freqs ? mlxd_row_major(freqs, keep) : nullptr;
    rope_eval(x, offsets, f, out, p);
  });
}

void check_rope(const array& x, const array& offsets, const std::optional<array>& freqs,
                const RopeParams& p) {
  std::ostringstream msg;
  if (x.dtype() != float32 || x.ndim() != 4) {
    msg << "x must be float32 [B, heads, L, D], got " << x.dtype() << " " << x.shape();
  } else if (p.dims <= 0 || p.dims % 2 != 0 || p.dims > x.shape(3)) {
    msg << "dims " << p.dims << " must be even, positive and at most D = " << x.shape(3);
  } else if (offsets.dtype() != int32 || offsets.ndim() > 1 ||
             (offsets.size() != 1 && offsets.size() != static_cast<size_t>(x.shape(0)))) {
    msg << "offsets must be int32, one or one per row, got " << offsets.dtype() << " "
        << offsets.shape();
  } else if (freqs && (freqs->dtype() != float32 || freqs->ndim() != 1 ||
                       freqs->shape(0) != p.dims / 2)) {
    msg << "freqs must be float32 [dims/2], got " << freqs->dtype() << " " << freqs->shape();
  } else {
    return;
  }
  throw std::invalid_argument("[mlxd_rope] " + msg.str());
}

array rope_cpu(const array& x, const array& offsets, const std::optional<array>& freqs,
               RopeParams p, Stream s) {
  p.has_freqs = freqs.has_value();
  check_rope(x, offsets, freqs, p);
  std::vector<array> inputs{x, offsets};
  if (freqs) {
    inputs.push_back(*freqs);
  }
  return array(x.shape(), float32, std::make_shared<RopeCpu>(s, p), std::move(inputs));
}

// ---------------------------------------------------------------------------------------------
// Decode attention: one query position per row over that row's own keys and values, as MLX's
// `scaled_dot_product_attention` fallback computes it on the CPU: q * scale, then per head one
// `cblas_sgemm` for the scores (M = 1) and one for scores times values, with MLX's softmax
// between (precise: f32). It calls the `cblas_sgemm` libmlx's matmul binds to, with the
// arguments MLX's matmul passes, so each head's output has the fallback's bits; its softmax is
// vmath.h's. One node instead of about a dozen per layer, and no padded batch copies.

// With `group_heads`, the query heads of one kv head go in one product (M = heads / kv_heads),
// reading its keys and values once: the caller asks for it only where the BLAS computes each
// row of a product with the bits it has alone (skinny-gemm's kernel).
struct AttentionParams {
  float scale;
  bool group_heads;
};

class DecodeAttentionCpu : public FastCpu {
 public:
  DecodeAttentionCpu(Stream stream, AttentionParams p) : FastCpu(stream), p_(p) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdDecodeAttention";
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const DecodeAttentionCpu&>(other);
    return std::string(name()) == o.name() && p_.scale == o.p_.scale &&
        p_.group_heads == o.p_.group_heads;
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[2].shape(-1);
    return {shape};
  }

 private:
  AttentionParams p_;
};

void DecodeAttentionCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& out = outputs[0];
  auto& encoder = encode(stream(), inputs, out);
  std::vector<array> ins;
  for (auto& in : inputs) {
    ins.push_back(array::unsafe_weak_copy(in));
  }
  encoder.dispatch([ins = std::move(ins), out = array::unsafe_weak_copy(out), p = p_]() mutable {
    std::vector<float> keep;
    const float* q = mlxd_row_major(ins[0], keep);
    const int64_t rows = ins[0].shape(0), heads = ins[0].shape(1), d = ins[0].shape(3);
    const int64_t dv = out.shape(3);
    std::vector<float> scaled(rows * heads * d);
    for (int64_t i = 0; i < rows * heads * d; i++) {
      scaled[i] = p.scale * q[i];
    }
    // Each row's gathered keys and values, where not contiguous, kept until all have run.
    std::vector<std::vector<float>> kept(2 * rows);
    std::vector<mlxd::Attend> attend;
    for (int64_t b = 0; b < rows; b++) {
      HeadRows k = mlxd::head_rows(ins[1 + 2 * b], kept[2 * b]);
      HeadRows v = mlxd::head_rows(ins[2 + 2 * b], kept[2 * b + 1]);
      attend.push_back({scaled.data() + b * heads * d, k, v, out.data<float>() + b * heads * dv});
    }
    // One position a row: no row's positions share a product.
    mlxd::attend_rows(attend, heads, {p.group_heads, 1});
  });
}

// Why row b's keys `k` and values `v` do not fit q [B, heads, 1, d], or "" when they do.
std::string check_row(const array& q, const array& k, const array& v) {
  std::ostringstream msg;
  if (k.dtype() != float32 || v.dtype() != float32 || k.ndim() != 4 || v.ndim() != 4) {
    msg << "keys and values must be float32 [1, kv_heads, T, d], got " << k.dtype() << " "
        << k.shape() << " and " << v.dtype() << " " << v.shape();
  } else if (k.shape(0) != 1 || v.shape(0) != 1 || k.shape(1) != v.shape(1) ||
             k.shape(2) != v.shape(2) || k.shape(2) == 0 || k.shape(3) != q.shape(3)) {
    msg << "keys " << k.shape() << " and values " << v.shape()
        << " must be [1, kv_heads, T > 0, d] with one T, for queries " << q.shape();
  } else if (q.shape(1) % k.shape(1) != 0) {
    msg << q.shape(1) << " query heads are not a multiple of " << k.shape(1) << " kv heads";
  }
  return msg.str();
}

array decode_attention_cpu(const array& q, const std::vector<array>& kv, AttentionParams p,
                           Stream s) {
  std::string why;
  if (q.dtype() != float32 || q.ndim() != 4 || q.shape(2) != 1) {
    why = "queries must be float32 [B, heads, 1, d]";
  } else if (kv.size() != 2 * static_cast<size_t>(q.shape(0))) {
    why = "one keys and one values array per row of the queries";
  }
  for (size_t b = 0; why.empty() && b < kv.size() / 2; b++) {
    why = check_row(q, kv[2 * b], kv[2 * b + 1]);
    if (why.empty() && (kv[2 * b].shape(1) != kv[0].shape(1) ||
                        kv[2 * b + 1].shape(3) != kv[1].shape(3))) {
      why = "every row's keys and values must have one kv head count and width";
    }
  }
  if (!why.empty()) {
    std::ostringstream msg;
    msg << "[mlxd_decode_attention] " << why << " (queries " << q.dtype() << " " << q.shape()
        << ")";
    throw std::invalid_argument(msg.str());
  }
  mlxd::require_sgemm(); // resolved now, so a process without a BLAS fails here rather than on the stream
  std::vector<array> inputs{q};
  inputs.insert(inputs.end(), kv.begin(), kv.end());
  auto shape = q.shape();
  shape.back() = kv[1].shape(3);
  return array(shape, float32, std::make_shared<DecodeAttentionCpu>(s, p), std::move(inputs));
}

// ---------------------------------------------------------------------------------------------
// Causal attention of one sequence's queries (prefill): MLX's sdpa fallback with a causal mask,
// whose softmax ran MLX's scalar exp (a call to `fmaf` per element) over every score: about a
// third of a long prompt's time. Same steps and bits (`mlxd::attend_causal`), exps vectorized.
// With a kernel (`cpu_numerics:int8`), the kernel computes it instead, in its own order
// (`quant_kernels::attention`): only the keys each query sees, shared over the threads.

// q [heads, len, d] scaled, keys and values of one sequence, out [heads, len, dv].
typedef void (*MlxdCausalKernel)(const float* q, int64_t heads, int64_t len,
                                 const mlxd::HeadRows* keys, const mlxd::HeadRows* values,
                                 float* out);

class CausalAttentionCpu : public FastCpu {
 public:
  CausalAttentionCpu(Stream stream, float scale, MlxdCausalKernel kernel)
      : FastCpu(stream), scale_(scale), kernel_(kernel) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdCausalAttention";
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const CausalAttentionCpu&>(other);
    return std::string(name()) == o.name() && scale_ == o.scale_ && kernel_ == o.kernel_;
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[2].shape(-1);
    return {shape};
  }

 private:
  float scale_;
  MlxdCausalKernel kernel_;
};

void CausalAttentionCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& out = outputs[0];
  auto& encoder = encode(stream(), inputs, out);
  encoder.dispatch([q = array::unsafe_weak_copy(inputs[0]),
                    k = array::unsafe_weak_copy(inputs[1]),
                    v = array::unsafe_weak_copy(inputs[2]),
                    out = array::unsafe_weak_copy(out),
                    scale = scale_, kernel = kernel_]() mutable {
    std::vector<float> keep_q, keep_k, keep_v;
    const float* qs = mlxd_row_major(q, keep_q);
    std::vector<float> scaled(q.size());
    for (size_t i = 0; i < scaled.size(); i++) {
      scaled[i] = scale * qs[i];
    }
    HeadRows keys = mlxd::head_rows(k, keep_k), values = mlxd::head_rows(v, keep_v);
    if (kernel != nullptr) {
      kernel(scaled.data(), q.shape(1), q.shape(2), &keys, &values, out.data<float>());
      return;
    }
    mlxd::attend_causal(scaled.data(), q.shape(2), keys, values, out.data<float>(), q.shape(1));
  });
}

array causal_attention_cpu(const array& q, const array& k, const array& v, float scale,
                           MlxdCausalKernel kernel, Stream s) {
  std::string why;
  if (q.dtype() != float32 || q.ndim() != 4 || q.shape(0) != 1) {
    why = "queries must be float32 [1, heads, L, d]";
  } else {
    why = check_row(q, k, v);
  }
  if (why.empty() && k.shape(2) < q.shape(2)) {
    why = "fewer keys than queries";
  }
  if (!why.empty()) {
    std::ostringstream msg;
    msg << "[mlxd_causal_attention] " << why << " (queries " << q.dtype() << " " << q.shape()
        << ")";
    throw std::invalid_argument(msg.str());
  }
  mlxd::require_sgemm();
  auto shape = q.shape();
  shape.back() = v.shape(3);
  return array(shape, float32, std::make_shared<CausalAttentionCpu>(s, scale, kernel),
               {q, k, v});
}

// ---------------------------------------------------------------------------------------------
// Log-sum-exp over the last axis (kept as 1), as MLX's `LogSumExp` on the CPU, its exps
// vectorized (vmath.h): the vocabulary's 49k exps a decode step took as scalar calls.

class LogSumExpCpu : public FastCpu {
 public:
  explicit LogSumExpCpu(Stream stream) : FastCpu(stream) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdLogSumExp";
  }

  bool is_equivalent(const Primitive& other) const override {
    return std::string(name()) == other.name();
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = 1;
    return {shape};
  }
};

void LogSumExpCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& out = outputs[0];
  auto& encoder = encode(stream(), inputs, out);
  encoder.dispatch([x = array::unsafe_weak_copy(inputs[0]),
                    out = array::unsafe_weak_copy(out)]() mutable {
    std::vector<float> keep;
    const float* xs = mlxd_row_major(x, keep);
    const int64_t n = x.shape(-1), rows = static_cast<int64_t>(out.size());
    // Kept by the stream thread: a vocabulary's row is 192 KB every step.
    thread_local std::vector<float> scratch;
    scratch.resize(n);
    for (int64_t r = 0; r < rows; r++) {
      out.data<float>()[r] = mlxd_logsumexp_row(xs + r * n, scratch.data(), n);
    }
  });
}

array logsumexp_cpu(const array& x, Stream s) {
  if (x.dtype() != float32 || x.ndim() == 0 || x.shape(-1) == 0) {
    std::ostringstream msg;
    msg << "[mlxd_logsumexp] x must be float32 [..., n > 0], got " << x.dtype() << " "
        << x.shape();
    throw std::invalid_argument(msg.str());
  }
  auto shape = x.shape();
  shape.back() = 1;
  return array(shape, float32, std::make_shared<LogSumExpCpu>(s), {x});
}

} // namespace

// x [..., D] f32 normed over D and scaled by weight [D] f32, as `fast::rms_norm` on the CPU.
extern "C" int mlxd_rms_norm(
    mlx_array* res,
    const mlx_array x,
    const mlx_array weight,
    float eps,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    mlx_array_set_(
        *res, rms_norm_cpu(mlx_array_get_(x), mlx_array_get_(weight), eps, mlx_stream_get_(s)));
  });
}

// x [B, heads, L, D] f32 rotated from `offsets` (int32, one or one per row), as `fast::rope`
// on the CPU. `freqs` is used when `has_freqs` (then `base` is not).
extern "C" int mlxd_rope(
    mlx_array* res,
    const mlx_array x,
    const mlx_array offsets,
    const mlx_array freqs,
    bool has_freqs,
    int dims,
    bool traditional,
    float base,
    float scale,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    std::optional<array> f;
    if (has_freqs) {
      f = mlx_array_get_(freqs);
    }
    RopeParams p{dims, traditional, base, scale, has_freqs};
    mlx_array_set_(
        *res, rope_cpu(mlx_array_get_(x), mlx_array_get_(offsets), f, p, mlx_stream_get_(s)));
  });
}

// queries [B, heads, 1, d] f32 over row b's keys kv[2b] [1, kv_heads, T_b, d] and values
// kv[2b+1] [1, kv_heads, T_b, dv] f32, as `fast::scaled_dot_product_attention` (no mask) on the
// CPU gives each row alone: [B, heads, 1, dv]. `group_heads`: see `AttentionParams`.
extern "C" int mlxd_decode_attention(
    mlx_array* res,
    const mlx_array queries,
    const mlx_array* kv,
    int rows,
    float scale,
    bool group_heads,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    std::vector<array> arrays;
    for (int i = 0; i < 2 * rows; i++) {
      arrays.push_back(mlx_array_get_(kv[i]));
    }
    mlx_array_set_(
        *res,
        decode_attention_cpu(
            mlx_array_get_(queries), arrays, {scale, group_heads}, mlx_stream_get_(s)));
  });
}

// queries [1, heads, L, d] f32 over keys [1, kv_heads, T >= L, d] and values [1, kv_heads, T, dv]
// with a causal mask (query i sees keys 0..=i + T - L), as `fast::scaled_dot_product_attention`
// with mask "causal" on the CPU: [1, heads, L, dv].
extern "C" int mlxd_causal_attention(
    mlx_array* res,
    const mlx_array queries,
    const mlx_array keys,
    const mlx_array values,
    float scale,
    MlxdCausalKernel kernel,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    mlx_array_set_(*res, causal_attention_cpu(mlx_array_get_(queries), mlx_array_get_(keys),
                                              mlx_array_get_(values), scale, kernel,
                                              mlx_stream_get_(s)));
  });
}

// log(sum(exp(x))) over x's last axis, kept as 1, f32: MLX's `logsumexp(x, -1, true)` on the CPU.
extern "C" int mlxd_logsumexp(mlx_array* res, const mlx_array x, const mlx_stream s) {
  return mlxd_guarded(
      [&] { mlx_array_set_(*res, logsumexp_cpu(mlx_array_get_(x), mlx_stream_get_(s))); });
}

// Table `which` of vmath.h (0 scalar, 1 AVX2+FMA, 2 AVX-512F) when this CPU runs it, for tests.
extern "C" bool mlxd_vmath_table(int which, MlxdVmath* out) {
  const MlxdVmath* t = nullptr;
  if (which == 0) {
    t = &mlxd_vmath_scalar();
  }
#if defined(__x86_64__)
  if (which == 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    t = &mlxd_vmath_avx2();
  }
  if (which == 2 && __builtin_cpu_supports("avx512f")) {
    t = &mlxd_vmath_avx512();
  }
#endif
  if (t != nullptr) {
    *out = *t;
  }
  return t != nullptr;
}
