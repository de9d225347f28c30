// An MLX primitive that multiplies f32 activations by affine-quantized weights as stored.
//
// MLX's C API has no way to add a CPU kernel, so this is MLX's documented extension
// mechanism: a `Primitive` whose `eval_cpu` dispatches our kernel (Rust, passed in)
// onto the stream's thread. The op stays a node of MLX's lazy graph, so `async_eval` and
// the one-step-ahead decode work as with any other op. Inputs: x [..., K] f32, w [N, K*bits/32]
// uint32 (MLX's packing: a little-endian bit stream per row), scales and biases [N, K/group]
// f32. Output: [..., N] f32.

#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/c/error.h"
#include "mlx/c/private/mlx.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "mlx/utils.h"
#include "mlx/backend/common/utils.h"

// The kernel, passed in by the Rust side (so no symbol has to cross the link in reverse).
// Scales and biases share one dtype, `params`: 0 float32, 1 bfloat16, 2 float16.
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
    float* out);

namespace {

using namespace mlx::core;

class QuantizedMatmulCpu : public Primitive {
 public:
  QuantizedMatmulCpu(Stream stream, int group, int bits, mlxd_qmm_kernel kernel)
      : Primitive(stream), group_(group), bits_(bits), kernel_(kernel) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs)
      override;

  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error(
        "[mlxd_quantized_matmul] runs on the CPU only; on Metal MLX's quantized_matmul is used");
  }

  const char* name() const override {
    return "MlxdQuantizedMatmul";
  }

  bool is_equivalent(const Primitive& other) const override {
    auto& o = static_cast<const QuantizedMatmulCpu&>(other);
    return group_ == o.group_ && bits_ == o.bits_ && kernel_ == o.kernel_;
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[1].shape(0);
    return {shape};
  }

 private:
  int group_;
  int bits_;
  mlxd_qmm_kernel kernel_;
};

// `a`'s elements in row-major order (a strided or broadcast f32 view).
std::vector<float> row_major(const array& a) {
  std::vector<float> out(a.size());
  const float* src = a.data<float>();
  for (size_t i = 0; i < out.size(); i++) {
    out[i] = src[elem_to_loc(static_cast<int>(i), a.shape(), a.strides())];
  }
  return out;
}

// The kernel's code for the dtype of scales and biases (`validate` allowed only these).
int32_t params_code(Dtype d) {
  return d == bfloat16 ? 1 : d == float16 ? 2 : 0;
}

void QuantizedMatmulCpu::eval_cpu(
    const std::vector<array>& inputs,
    std::vector<array>& outputs) {
  auto& out = outputs[0];
  out.set_data(allocator::malloc(out.nbytes()));
  auto& encoder = cpu::get_command_encoder(stream());
  auto &x = inputs[0], &w = inputs[1], &scales = inputs[2], &biases = inputs[3];
  for (size_t i = 0; i < inputs.size(); i++) {
    // `row_contiguous` below put a copy in front of a weight that might not be; x is
    // gathered on the stream thread when it is not (rare: it is not worth a node per product).
    if (i > 0 && !inputs[i].flags().row_contiguous) {
      throw std::runtime_error("[mlxd_quantized_matmul] a weight is not row-contiguous");
    }
    encoder.set_input_array(inputs[i]);
  }
  encoder.set_output_array(out);
  int64_t k = x.shape(-1);
  int64_t m = k == 0 ? 0 : static_cast<int64_t>(x.size()) / k;
  int64_t n = w.shape(0);
  encoder.dispatch([x = array::unsafe_weak_copy(x),
                    w = array::unsafe_weak_copy(w),
                    scales = array::unsafe_weak_copy(scales),
                    biases = array::unsafe_weak_copy(biases),
                    out = array::unsafe_weak_copy(out),
                    m,
                    k,
                    n,
                    bits = bits_,
                    group = group_,
                    params = params_code(scales.dtype()),
                    kernel = kernel_]() mutable {
    std::vector<float> gathered;
    if (!x.flags().row_contiguous) {
      gathered = row_major(x);
    }
    kernel(
        gathered.empty() ? x.data<float>() : gathered.data(),
        m,
        k,
        w.data<uint8_t>(),
        scales.data<void>(),
        biases.data<void>(),
        params,
        n,
        bits,
        group,
        out.data<float>());
  });
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    throw std::invalid_argument("[mlxd_quantized_matmul] " + what);
  }
}

std::string shape_of(const array& a) {
  std::ostringstream s;
  s << a.shape();
  return s.str();
}

// Checks the operands against each other, so the kernel can trust every size.
void validate(
    const array& x,
    const array& w,
    const array& scales,
    const array& biases,
    int group,
    int bits) {
  check(
      bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 ||
          bits == 8,
      "bits must be 2, 3, 4, 5, 6 or 8, not " + std::to_string(bits));
  check(
      group == 32 || group == 64 || group == 128,
      "group size must be 32, 64 or 128, not " + std::to_string(group));
  check(x.dtype() == float32, "x must be float32");
  check(w.dtype() == uint32 && w.ndim() == 2, "w must be a 2-D uint32 array");
  auto d = scales.dtype();
  check(
      (d == float32 || d == bfloat16 || d == float16) && biases.dtype() == d,
      "scales and biases must share one dtype: float32, bfloat16 or float16");
  check(x.ndim() >= 1, "x must have at least one dimension");
  int64_t k = x.shape(-1);
  check(
      int64_t(w.shape(1)) * 32 == k * bits,
      "w " + shape_of(w) + " does not hold " + std::to_string(k) + " inputs of " +
          std::to_string(bits) + " bits");
  check(k % group == 0, "K " + std::to_string(k) + " is not a multiple of the group size");
  Shape groups = {w.shape(0), static_cast<int>(k / group)};
  check(
      scales.shape() == groups && biases.shape() == groups,
      "scales " + shape_of(scales) + " and biases " + shape_of(biases) +
          " must both be [N, K/group]");
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

array quantized_matmul_cpu(
    const array& x,
    const array& w,
    const array& scales,
    const array& biases,
    int group,
    int bits,
    mlxd_qmm_kernel kernel,
    StreamOrDevice s) {
  check(kernel != nullptr, "no kernel");
  validate(x, w, scales, biases, group, bits);
  auto shape = x.shape();
  shape.back() = w.shape(0);
  return array(
      std::move(shape),
      float32,
      std::make_shared<QuantizedMatmulCpu>(to_stream(s), group, bits, kernel),
      {x,
       row_contiguous(w, s),
       row_contiguous(scales, s),
       row_contiguous(biases, s)});
}

} // namespace

extern "C" int mlxd_quantized_matmul(
    mlx_array* res,
    const mlx_array x,
    const mlx_array w,
    const mlx_array scales,
    const mlx_array biases,
    int group,
    int bits,
    mlxd_qmm_kernel kernel,
    const mlx_stream s) {
  try {
    mlx_array_set_(
        *res,
        quantized_matmul_cpu(
            mlx_array_get_(x),
            mlx_array_get_(w),
            mlx_array_get_(scales),
            mlx_array_get_(biases),
            group,
            bits,
            kernel,
            mlx_stream_get_(s)));
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 1;
  }
  return 0;
}
