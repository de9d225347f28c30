// An MLX primitive whose value comes from outside MLX: when it runs, the CPU stream's thread
// waits (blocked, not polling) for a caller-supplied source to fill it.
//
// Pipeline ranks receive decode-size activations this way over their control connection:
// a step's whole graph can be handed to MLX before its input has arrived, and nothing busy-
// polls a core meanwhile (MLX's ring receive does, which a rank sharing cores with the one
// computing cannot afford). No inputs, like MLX's own `Arange`; always on the CPU stream, so
// on Metal the GPU work that depends on it waits through MLX's cross-stream events.

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/c/error.h"
#include "mlx/c/private/mlx.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

// The Rust side's source: `fill` blocks until the value tagged `tag` is there and copies its
// `nbytes` into `dst` (0), or gives up (non-zero: the output is then zeros, and the Rust side
// reports why); `release` drops the source, exactly once.
typedef int32_t (*mlxd_host_fill)(void* source, uint64_t tag, uint8_t* dst, uint64_t nbytes);
typedef void (*mlxd_host_release)(void* source);

namespace {

using namespace mlx::core;

constexpr const char* HOST_RECEIVE = "mlxd_host_receive";

// Owns the Rust source; shared by the node and any evaluation of it still queued.
struct Source {
  void* source;
  mlxd_host_fill fill;
  mlxd_host_release release;
  Source(void* s, mlxd_host_fill f, mlxd_host_release r) : source(s), fill(f), release(r) {}
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  ~Source() {
    release(source);
  }
};

class HostReceive : public Primitive {
 public:
  HostReceive(Stream stream, std::shared_ptr<Source> source, uint64_t tag, Shape shape)
      : Primitive(stream), source_(std::move(source)), tag_(tag), shape_(std::move(shape)) {}

  void eval_cpu(const std::vector<array>&, std::vector<array>& outputs) override {
    auto& out = outputs[0];
    out.set_data(allocator::malloc(out.nbytes()));
    auto& encoder = cpu::get_command_encoder(stream());
    encoder.set_output_array(out);
    encoder.dispatch(
        [out = array::unsafe_weak_copy(out), source = source_, tag = tag_]() mutable {
          auto* dst = out.data<uint8_t>();
          if (source->fill(source->source, tag, dst, out.nbytes()) != 0) {
            std::memset(dst, 0, out.nbytes());
          }
        });
  }

  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("[MlxdHostReceive] runs on the CPU stream only");
  }

  const char* name() const override {
    return "MlxdHostReceive";
  }

  // Two receives are never the same value, whatever their tags.
  bool is_equivalent(const Primitive&) const override {
    return false;
  }

  std::vector<Shape> output_shapes(const std::vector<array>&) override {
    return {shape_};
  }

 private:
  std::shared_ptr<Source> source_;
  uint64_t tag_;
  Shape shape_;
};

} // namespace

// Builds the node on `s`, or on the default CPU stream when `s` is a GPU one. Takes `source` over in every case: it is released exactly once, with the
// node, or here when the node cannot be built.
extern "C" int mlxd_host_receive(
    mlx_array* res,
    const int* shape,
    size_t ndim,
    mlx_dtype dtype,
    void* source,
    uint64_t tag,
    mlxd_host_fill fill,
    mlxd_host_release release,
    const mlx_stream s) {
  std::shared_ptr<Source> owned;
  try {
    owned = std::make_shared<Source>(source, fill, release);
  } catch (std::exception& e) {
    release(source);
    mlx_error(e.what());
    return 1;
  }
  try {
    if (fill == nullptr) {
      throw std::invalid_argument(std::string("[") + HOST_RECEIVE + "] no fill function");
    }
    Shape dims(shape, shape + ndim);
    for (auto d : dims) {
      if (d < 0) {
        throw std::invalid_argument(std::string("[") + HOST_RECEIVE + "] a negative dimension");
      }
    }
    auto stream = mlx_stream_get_(s);
    if (stream.device != Device::cpu) {
      stream = default_stream(Device::cpu);
    }
    mlx_array_set_(
        *res,
        array(
            dims,
            mlx_dtype_to_cpp(dtype),
            std::make_shared<HostReceive>(stream, std::move(owned), tag, dims),
            {}));
  } catch (std::exception& e) {
    mlx_error(e.what());
    return 1;
  }
  return 0;
}
