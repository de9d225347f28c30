// MLX's `fast::rms_norm` and `fast::rope` as one node each on the CPU.
//
// MLX has no CPU kernels for its fast ops: on the CPU each call becomes the fallback graph of
// plain ops (about 10 nodes for an RMS norm and 30 for a rope, counted in a decode step), and a
// decode step of a small model is bound by the cost of a node, not by arithmetic. These nodes
// compute exactly what those fallbacks compute, in the same order and with MLX's own scalar
// functions (`detail::Rsqrt`, `Exp`, `Sin`, `Cos` from the headers of the libmlx we link, whose
// CPU SIMD width is 1 on x86-64 Linux), so every output has the fallback's bits; the tests
// compare them bit for bit. f32 only: other dtypes keep MLX's own path.

#include <cmath>
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
#include "shim.h"

namespace {

using namespace mlx::core;

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
    rms_norm_rows(
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

struct RopeParams {
  int dims;
  bool traditional;
  float base;
  float scale;
  bool has_freqs;
};

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

// The inverse frequencies, as the fallback makes them.
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

// One position's rotation of every head of row b: x and out point at [b, 0, t, 0].
struct RopeRow {
  const float* x;
  int64_t head_stride;
  int64_t dim_stride;
  float* out;
  int64_t out_head_stride;
};

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

void rope_eval(const array& x, const array& offsets, const float* freqs, array& out,
               const RopeParams& p) {
  const int64_t B = x.shape(0), N = x.shape(1), T = x.shape(2), D = x.shape(3);
  const auto& st = x.strides();
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const int32_t* off = offsets.data<int32_t>();
  const bool per_row = offsets.size() > 1;
  const std::vector<float> inv = inv_freqs(p, freqs);
  const int half = p.dims / 2;
  std::vector<float> cos_t(half), sin_t(half);
  detail::Cos cos;
  detail::Sin sin;
  for (int64_t b = 0; b < B; b++) {
    const float offset = static_cast<float>(off[per_row ? b * offsets.strides(0) : 0]);
    for (int64_t t = 0; t < T; t++) {
      const float position = (static_cast<float>(t) + offset) * p.scale;
      for (int j = 0; j < half; j++) {
        float theta = position * inv[j];
        cos_t[j] = cos(theta);
        sin_t[j] = sin(theta);
      }
      RopeRow row{
          xp + b * st[0] + t * st[2], st[1], st[3], op + ((b * N) * T + t) * D, T * D};
      rotate_heads(row, N, D, p, cos_t.data(), sin_t.data());
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
