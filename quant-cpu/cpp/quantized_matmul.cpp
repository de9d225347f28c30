// An MLX primitive that multiplies f32 activations by affine-quantized weights as stored.
//
// MLX's C API has no way to add a CPU kernel, so this is MLX's documented extension
// mechanism: a `Primitive` whose `eval_cpu` dispatches our kernel (Rust, passed in)
// onto the stream's thread. The op stays a node of MLX's lazy graph, so `async_eval` and
// the one-step-ahead decode work as with any other op. Inputs: x [..., K] f32, w [N, K*bits/32]
// uint32 (MLX's packing: a little-endian bit stream per row), scales and biases [N, K/group]
// (f32, bf16 or f16). Output: [..., N] f32. In MLX's float modes (mxfp4, mxfp8, nvfp4) the
// scales are uint8 (E8M0 or E4M3) and there are no biases: a weight's inputs are w and scales.
//
// A second primitive, the gathered product of mixture-of-experts layers, multiplies row r of
// x [R, K] by expert indices[r] of w [E, N, K*bits/32] (scales and biases [E, N, K/group]),
// handing each run of rows with the same expert to the same kernel. Output: [R, N] f32.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/backend/cpu/unary_ops.h"
#include "mlx/c/error.h"
#include "mlx/c/private/mlx.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"
#include "mlx/backend/common/utils.h"
#include "cpu_steps.h"
#include "shim.h"
#include "vmath.h"

namespace {

using namespace mlx::core;

constexpr const char* QMM = "mlxd_quantized_matmul";
constexpr const char* GATHER_QMM = "mlxd_gather_quantized_matmul";
constexpr const char* QMMS = "mlxd_quantized_matmuls";

// A product's format: MLX's mode (`MlxdMode`), bits per code and codes per scale.
struct Format {
  int group;
  int bits;
  int mode;

  // Inputs per weight: w, scales and (affine) biases.
  size_t per_weight() const {
    return mode == MLXD_AFFINE ? 3 : 2;
  }

  bool operator==(const Format& o) const {
    return group == o.group && bits == o.bits && mode == o.mode;
  }
};

// What both products share: the format, the kernel, and the CPU-only stance.
class QuantizedPrimitive : public Primitive {
 public:
  QuantizedPrimitive(Stream stream, Format format, mlxd_qmm_kernel kernel)
      : Primitive(stream), format_(format), kernel_(kernel) {}

  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error(
        std::string("[") + name() +
        "] runs on the CPU only; on Metal MLX's own quantized products are used");
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const QuantizedPrimitive&>(other);
    return std::string(name()) == o.name() && format_ == o.format_ && kernel_ == o.kernel_;
  }

 protected:
  Format format_;
  mlxd_qmm_kernel kernel_;
};

// Inputs x [R, K], w [E, N, K*bits/32], scales, biases (affine) [E, N, K/group], indices [R].
class GatherQuantizedMatmulCpu : public QuantizedPrimitive {
 public:
  using QuantizedPrimitive::QuantizedPrimitive;

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs)
      override;

  const char* name() const override {
    return "MlxdGatherQuantizedMatmul";
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    return {{inputs[0].shape(0), inputs[1].shape(1)}};
  }
};

// Products of one x by one weight or several (a layer's q, k and v; or gate and up), as one node.
// Inputs x, then w, scales (and, affine, biases) per weight, all of one format; one output per
// weight, each
// with the bits of that product alone. With `swiglu` (two weights, gate and up)
// the one output is silu(x gate^T) * (x up^T), with the bits of mlx-lm's MLP as MLX computes it
// on the CPU: `gate * sigmoid(gate)` (MLX's `detail::Sigmoid`, vectorized in vmath.h), times `up`.
class QuantizedMatmulsCpu : public QuantizedPrimitive {
 public:
  QuantizedMatmulsCpu(Stream stream, Format format, mlxd_qmm_kernel kernel, bool swiglu)
      : QuantizedPrimitive(stream, format, kernel), swiglu_(swiglu) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs)
      override;

  const char* name() const override {
    return swiglu_ ? "MlxdQuantizedSwiGlu" : "MlxdQuantizedMatmul";
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    std::vector<Shape> shapes;
    for (size_t i = 1; i < inputs.size() && !(swiglu_ && i > 1); i += format_.per_weight()) {
      auto shape = inputs[0].shape();
      shape.back() = inputs[i].shape(0);
      shapes.push_back(std::move(shape));
    }
    return shapes;
  }

 private:
  bool swiglu_;
};

// The kernel's code for the dtype of scales and biases (`validate` allowed only these).
int32_t params_code(Dtype d) {
  return d == bfloat16 ? 1 : d == float16 ? 2 : d == uint8 ? 3 : 0;
}

// Hands the inputs to the encoder. `row_contiguous` below put a copy in front of a weight
// (inputs 1..weights_end: w, scales and biases) that might not be; x (and the indices) are read as
// they lie, x gathered on the stream thread when it is not row-major (rare: not worth a node
// per product).
void set_inputs(
    cpu::CommandEncoder& encoder,
    const std::vector<array>& inputs,
    size_t weights_end,
    const char* op) {
  for (size_t i = 0; i < inputs.size(); i++) {
    if (i >= 1 && i < weights_end && !inputs[i].flags().row_contiguous) {
      throw std::runtime_error(std::string("[") + op + "] a weight is not row-contiguous");
    }
    encoder.set_input_array(inputs[i]);
  }
}

// The products of a `QuantizedMatmulsCpu` as the stream thread runs them.
struct Products {
  std::vector<array> inputs;
  std::vector<array> outputs;
  int64_t m;
  int64_t k;
  Format format;
  mlxd_qmm_kernel kernel;
  bool swiglu;

  void run() {
    std::vector<float> gathered, up;
    const float* x = mlxd_row_major(inputs[0], gathered);
    const size_t per = format.per_weight();
    for (size_t j = 0; 1 + per * j < inputs.size(); j++) {
      auto &w = inputs[1 + per * j], &scales = inputs[2 + per * j];
      const void* biases = per == 3 ? inputs[3 + per * j].data<void>() : nullptr;
      int64_t n = w.shape(0);
      float* out = outputs[swiglu ? 0 : j].data<float>();
      if (swiglu && j == 1) {
        up.resize(m * n);
        out = up.data();
      }
      kernel(x, m, k, w.data<uint8_t>(), scales.data<void>(), biases,
             params_code(scales.dtype()), n, format.bits, format.group, format.mode, out);
    }
    if (swiglu) {
      mlxd_vmath().silu_mul(outputs[0].data<float>(), up.data(), static_cast<int64_t>(up.size()));
    }
  }
};

void QuantizedMatmulsCpu::eval_cpu(
    const std::vector<array>& inputs,
    std::vector<array>& outputs) {
  auto& encoder = cpu::get_command_encoder(stream());
  set_inputs(encoder, inputs, inputs.size(), name());
  Products p{{}, {}, 0, inputs[0].shape(-1), format_, kernel_, swiglu_};
  for (auto& in : inputs) {
    p.inputs.push_back(array::unsafe_weak_copy(in));
  }
  for (auto& out : outputs) {
    out.set_data(allocator::malloc(out.nbytes()));
    encoder.set_output_array(out);
    p.outputs.push_back(array::unsafe_weak_copy(out));
  }
  p.m = p.k == 0 ? 0 : static_cast<int64_t>(inputs[0].size()) / p.k;
  encoder.dispatch([p = std::move(p)]() mutable { p.run(); });
}

// A gathered product as the stream thread runs it: evaluated operands, x row-major.
struct Gather {
  const float* x;
  const uint8_t* w;
  const uint8_t* scales;
  const uint8_t* biases;  // null in a float mode
  int32_t params;
  int64_t param_bytes;
  int64_t k;
  int64_t n;
  int64_t experts;
  Format format;
  mlxd_qmm_kernel kernel;
};

// The expert of row `r`, or -1 when the index is outside [0, experts): the indices are lazy
// values, so only here, at evaluation, can a bad one be caught before it addresses w.
int64_t expert_of(const array& indices, int64_t r, int64_t experts) {
  auto at = elem_to_loc(static_cast<int>(r), indices);
  int64_t e = indices.dtype() == int32 ? int64_t(indices.data<int32_t>()[at])
                                       : int64_t(indices.data<uint32_t>()[at]);
  return e >= 0 && e < experts ? e : -1;
}

// Rows r0..r1 of the output, all of expert `e`, as one multi-row product on the expert's
// slice of w, scales and biases; an expert of -1 (one this rank does not hold, in expert
// parallelism) gives zero rows and reads nothing, as does K = 0.
void gather_run(const Gather& g, int64_t e, int64_t r0, int64_t r1, float* out) {
  float* rows = out + r0 * g.n;
  if (e < 0 || g.k == 0) {
    std::fill(rows, rows + (r1 - r0) * g.n, 0.0f);
    return;
  }
  int64_t params = e * g.n * (g.k / g.format.group) * g.param_bytes;
  g.kernel(
      g.x + r0 * g.k,
      r1 - r0,
      g.k,
      g.w + e * g.n * (g.k * g.format.bits / 8),
      g.scales + params,
      g.biases ? g.biases + params : nullptr,
      g.params,
      g.n,
      g.format.bits,
      g.format.group,
      g.format.mode,
      rows);
}

// Walks the rows: each run of consecutive rows with the same expert is one product, so
// sorted indices (long prompts) reach the kernels' many-row paths.
void gather_rows(const Gather& g, const array& indices, int64_t rows, float* out) {
  for (int64_t r0 = 0; r0 < rows;) {
    int64_t e = expert_of(indices, r0, g.experts);
    int64_t r1 = r0 + 1;
    while (r1 < rows && expert_of(indices, r1, g.experts) == e) {
      r1++;
    }
    gather_run(g, e, r0, r1, out);
    r0 = r1;
  }
}

void GatherQuantizedMatmulCpu::eval_cpu(
    const std::vector<array>& inputs,
    std::vector<array>& outputs) {
  auto& out = outputs[0];
  out.set_data(allocator::malloc(out.nbytes()));
  auto& encoder = cpu::get_command_encoder(stream());
  const size_t weights_end = 1 + format_.per_weight();
  set_inputs(encoder, inputs, weights_end, GATHER_QMM);
  encoder.set_output_array(out);
  // A float mode has no biases: the scales stand in (never read).
  encoder.dispatch([x = array::unsafe_weak_copy(inputs[0]),
                    w = array::unsafe_weak_copy(inputs[1]),
                    scales = array::unsafe_weak_copy(inputs[2]),
                    biases = array::unsafe_weak_copy(inputs[weights_end - 1]),
                    indices = array::unsafe_weak_copy(inputs[weights_end]),
                    out = array::unsafe_weak_copy(out),
                    format = format_,
                    kernel = kernel_]() mutable {
    std::vector<float> gathered;
    Gather g{
        mlxd_row_major(x, gathered),
        w.data<uint8_t>(),
        scales.data<uint8_t>(),
        format.mode == MLXD_AFFINE ? biases.data<uint8_t>() : nullptr,
        params_code(scales.dtype()),
        static_cast<int64_t>(scales.itemsize()),
        x.shape(1),
        w.shape(1),
        w.shape(0),
        format,
        kernel};
    gather_rows(g, indices, x.shape(0), out.data<float>());
  });
}

template <typename F>
void check(bool ok, const char* op, F&& what) {
  mlxd_check(ok, op, std::forward<F>(what));
}

std::string shape_of(const Shape& shape) {
  std::ostringstream s;
  s << shape;
  return s.str();
}

// "uint32 (8,16,32)": the dtype and shape of `a`, for messages.
std::string describe(const array& a) {
  std::ostringstream s;
  s << a.dtype() << " " << a.shape();
  return s.str();
}

// MLX's name of a mode, for messages.
const char* mode_name(int mode) {
  switch (mode) {
    case MLXD_AFFINE: return "affine";
    case MLXD_MXFP4: return "mxfp4";
    case MLXD_MXFP8: return "mxfp8";
    case MLXD_NVFP4: return "nvfp4";
    default: return "unknown";
  }
}

// The format is one MLX writes: affine bits 2/3/4/5/6/8 and groups 32/64/128, or a float
// mode's one (bits, group).
void validate_format(const char* op, Format f) {
  auto fixed = [&](int bits, int group) {
    check(f.bits == bits && f.group == group, op, [&] {
      return std::string(mode_name(f.mode)) + " takes " + std::to_string(bits) +
          " bits and group size " + std::to_string(group) + ", not " + std::to_string(f.bits) +
          " and " + std::to_string(f.group);
    });
  };
  switch (f.mode) {
    case MLXD_AFFINE: break;
    case MLXD_MXFP4: return fixed(4, 32);
    case MLXD_MXFP8: return fixed(8, 32);
    case MLXD_NVFP4: return fixed(4, 16);
    default: check(false, op, [&] { return "unknown mode " + std::to_string(f.mode); });
  }
  const int bits = f.bits, group = f.group;
  check(
      bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8,
      op,
      [&] { return "bits must be 2, 3, 4, 5, 6 or 8, not " + std::to_string(bits); });
  check(
      group == 32 || group == 64 || group == 128,
      op,
      [&] { return "group size must be 32, 64 or 128, not " + std::to_string(group); });
}

// Scales (and biases) of the mode's dtype: affine scales and biases of one float dtype; a
// float mode's scales uint8 (E8M0 or E4M3) and no biases.
void validate_params(const char* op, const array& scales, const array* biases, int mode) {
  auto d = scales.dtype();
  if (mode != MLXD_AFFINE) {
    check(d == uint8, op, [&] {
      return std::string(mode_name(mode)) + " scales must be uint8, not " + describe(scales);
    });
    check(biases == nullptr, op, [&] {
      return std::string(mode_name(mode)) + " weights have no biases, but biases were given";
    });
    return;
  }
  check(biases != nullptr, op, "affine weights need biases");
  check(
      (d == float32 || d == bfloat16 || d == float16) && biases->dtype() == d,
      op,
      "scales and biases must share one dtype: float32, bfloat16 or float16");
}

// Checks what every product shares, so the kernel can trust every size: the format, the
// dtypes, and that w [..., N, K*bits/32], scales (and biases) [..., N, K/group] hold K inputs
// per row, K a multiple of the kernels' 32-code step. `w_ndim` is 2 for the plain product, 3
// (experts first) for the gathered one.
void validate_codes(
    const char* op,
    int64_t k,
    const array& w,
    const array& scales,
    const array* biases,
    Format f,
    int w_ndim) {
  validate_format(op, f);
  check(
      w.dtype() == uint32 && static_cast<int>(w.ndim()) == w_ndim,
      op,
      [&] {
        return w_ndim == 2 ? std::string("w must be a 2-D uint32 array")
                           : "w must be a 3-D uint32 array [E, N, K*bits/32], not " + describe(w);
      });
  validate_params(op, scales, biases, f.mode);
  check(
      int64_t(w.shape(-1)) * 32 == k * f.bits,
      op,
      [&] {
        return "w " + shape_of(w.shape()) + " does not hold " + std::to_string(k) +
            " inputs of " + std::to_string(f.bits) + " bits";
      });
  check(k % f.group == 0 && k % 32 == 0, op, [&] {
    return "K " + std::to_string(k) + " is not a multiple of the group size and of 32";
  });
  Shape groups = w.shape();
  groups.back() = static_cast<int>(k / f.group);
  check(
      scales.shape() == groups && (!biases || biases->shape() == groups),
      op,
      [&] {
        return "scales " + shape_of(scales.shape()) +
            (biases ? " and biases " + shape_of(biases->shape()) + " must both" : " must") +
            " be " + (w_ndim == 2 ? "[N, K/group]" : "[E, N, K/group]") + " = " +
            shape_of(groups);
      });
}

// `validate_codes` for x [..., K] f32.
void validate_weights(
    const char* op,
    const array& x,
    const array& w,
    const array& scales,
    const array* biases,
    Format f,
    int w_ndim) {
  check(x.dtype() == float32, op, "x must be float32");
  check(x.ndim() >= 1, op, "x must have at least one dimension");
  validate_codes(op, x.shape(-1), w, scales, biases, f, w_ndim);
}

// The gathered product's own checks: x [R, K], and one uint32 or int32 expert per row.
void validate_gather(const array& x, const array& indices) {
  check(x.ndim() == 2, GATHER_QMM, [&] { return "x must be 2-D [R, K], not " + shape_of(x.shape()); });
  check(
      indices.dtype() == uint32 || indices.dtype() == int32,
      GATHER_QMM,
      "indices must be uint32 or int32");
  check(
      indices.ndim() == 1 && indices.shape(0) == x.shape(0),
      GATHER_QMM,
      [&] {
        return "indices " + shape_of(indices.shape()) + " must be [R] = [" +
            std::to_string(x.shape(0)) + "], one expert per row of x";
      });
}

// `a`, or a row-contiguous copy of it: the kernel reads rows as they lie in memory. Loaded
// weights are already, so they pass as they are; a lazy input gets a `contiguous` node, a
// no-op copy when it turns out to be contiguous.
array row_contiguous(const array& a, StreamOrDevice s) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return contiguous(a, false, s);
}

// A packed weight as the C entry points take it: biases only in the affine mode.
struct Packed {
  array w;
  array scales;
  std::optional<array> biases;

  const array* bias() const {
    return biases ? &*biases : nullptr;
  }
};

array gather_quantized_matmul_cpu(
    const array& x,
    const Packed& p,
    const array& indices,
    Format f,
    mlxd_qmm_kernel kernel,
    StreamOrDevice s) {
  check(kernel != nullptr, GATHER_QMM, "no kernel");
  validate_weights(GATHER_QMM, x, p.w, p.scales, p.bias(), f, 3);
  validate_gather(x, indices);
  std::vector<array> inputs{x, row_contiguous(p.w, s), row_contiguous(p.scales, s)};
  if (p.biases) {
    inputs.push_back(row_contiguous(*p.biases, s));
  }
  inputs.push_back(indices);
  return array(
      {x.shape(0), p.w.shape(1)},
      float32,
      std::make_shared<GatherQuantizedMatmulCpu>(to_stream(s), f, kernel),
      std::move(inputs));
}

// `op` names the entry point in errors.
std::vector<array> quantized_matmuls_cpu(
    const char* op,
    const array& x,
    const std::vector<Packed>& weights,
    Format f,
    mlxd_qmm_kernel kernel,
    bool swiglu,
    StreamOrDevice s) {
  check(kernel != nullptr, op, "no kernel");
  check(!weights.empty(), op, "no weights: they come as (w, scales, biases)");
  check(!swiglu || weights.size() == 2, op, "SwiGLU takes two weights, gate and up");
  std::vector<array> inputs{x};
  std::vector<Shape> shapes;
  for (auto& p : weights) {
    validate_weights(op, x, p.w, p.scales, p.bias(), f, 2);
    check(!swiglu || p.w.shape(0) == weights[0].w.shape(0), op,
          "gate and up must have the same output size");
    inputs.push_back(row_contiguous(p.w, s));
    inputs.push_back(row_contiguous(p.scales, s));
    if (p.biases) {
      inputs.push_back(row_contiguous(*p.biases, s));
    }
    auto shape = x.shape();
    shape.back() = p.w.shape(0);
    shapes.push_back(std::move(shape));
  }
  if (swiglu) {
    shapes.resize(1);
  }
  std::vector<Dtype> dtypes(shapes.size(), float32);
  return array::make_arrays(
      std::move(shapes),
      dtypes,
      std::make_shared<QuantizedMatmulsCpu>(to_stream(s), f, kernel, swiglu),
      inputs);
}

} // namespace

namespace mlxd {

int32_t packed_params_code(Dtype d) {
  return params_code(d);
}

void validate_packed(const char* op, int64_t k, const array& w, const array& scales,
                     const array* biases, int group, int bits, int mode) {
  validate_codes(op, k, w, scales, biases, {group, bits, mode}, 2);
}

} // namespace mlxd

namespace {

// A weight from the C API: biases absent when their handle is empty (a float mode).
Packed packed(const mlx_array w, const mlx_array scales, const mlx_array biases) {
  std::optional<array> b;
  if (biases.ctx) {
    b = mlx_array_get_(biases);
  }
  return {mlx_array_get_(w), mlx_array_get_(scales), std::move(b)};
}

} // namespace

// x times one weight; `biases` an empty handle in a float mode (`mode`: `MlxdMode`).
extern "C" int mlxd_quantized_matmul(
    mlx_array* res,
    const mlx_array x,
    const mlx_array w,
    const mlx_array scales,
    const mlx_array biases,
    int group,
    int bits,
    int mode,
    mlxd_qmm_kernel kernel,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    mlx_array_set_(
        *res,
        quantized_matmuls_cpu(
            QMM,
            mlx_array_get_(x),
            {packed(w, scales, biases)},
            {group, bits, mode},
            kernel,
            false,
            mlx_stream_get_(s))[0]);
  });
}

// Row r of x times expert indices[r] of w; rows whose index is out of range come out zero.
extern "C" int mlxd_gather_quantized_matmul(
    mlx_array* res,
    const mlx_array x,
    const mlx_array w,
    const mlx_array scales,
    const mlx_array biases,
    const mlx_array indices,
    int group,
    int bits,
    int mode,
    mlxd_qmm_kernel kernel,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    mlx_array_set_(
        *res,
        gather_quantized_matmul_cpu(
            mlx_array_get_(x),
            packed(w, scales, biases),
            mlx_array_get_(indices),
            {group, bits, mode},
            kernel,
            mlx_stream_get_(s)));
  });
}

// x times each of `count` weights (w, scales, biases at weights[3j..3j+3], biases an empty
// handle in a float mode), one node; with `swiglu`, silu(x gate^T) * (x up^T) as one output.
extern "C" int mlxd_quantized_matmuls(
    mlx_vector_array* res,
    const mlx_array x,
    const mlx_array* weights,
    int count,
    int group,
    int bits,
    int mode,
    mlxd_qmm_kernel kernel,
    bool swiglu,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    std::vector<Packed> ws;
    for (int i = 0; i < count; i++) {
      ws.push_back(packed(weights[3 * i], weights[3 * i + 1], weights[3 * i + 2]));
    }
    mlx_vector_array_set_(
        *res,
        quantized_matmuls_cpu(
            QMMS, mlx_array_get_(x), ws, {group, bits, mode}, kernel, swiglu,
            mlx_stream_get_(s)));
  });
}
