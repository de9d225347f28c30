// A dense decoder layer's decode step (a few new positions per row) as one node on the CPU.
//
// Built op by op, a layer's step is about 23 nodes (norms, products, reshapes, transposes,
// ropes, cache writes and reads, attention, residual adds). A small model's decode step is
// bound by the cost of a node (building, scheduling, allocating), not by arithmetic: the
// engine thread spent more time building a step than the stream thread spent computing its
// products. This node runs the same steps in the same order (cpu_steps.h, the packed kernel,
// vmath.h), so every output has the bits of the nodes it replaces; the tests compare them.
//
// The layer's weights (`MlxdLayer`, made and checked once): the attention norm [D]; q, k, v,
// o packed (w, scales, biases each; in a float mode the biases slot holds the scales again,
// never read); the MLP norm [D]; gate, up, down packed; then q/k/v
// biases [N] f32 when the layer has them, q and k norms [head_dim] f32 when it has them,
// rope frequencies [dims/2] f32 when given. A step's node shares them instead of taking them
// as inputs: a node's inputs cost the engine thread per step (a weak copy, a reference held
// until the step ends), and 26 of a layer's 29 were weights that never change.
//
// A step's inputs: x [B, L, D] f32, then per row b its key and value buffers
// [1, kv_heads, capacity, head_dim] f32. Row b's L new positions go at `offsets[b]` ..
// `offsets[b] + L - 1` (< capacity), and position p attends over positions 0..=p: each
// position exactly as a decode step of one position there (a speculative step verifies its
// proposals with the bits plain decoding gives them). Outputs: the layer's output
// [B, L, D], then each row's key and value
// buffers with the new positions written: in place where the caller says the row's buffers
// are its alone (`exclusive[b]`), else into a copy. The caller decides, not MLX's reference
// count (as its slice update does): a step is built while the one before still runs, and
// that step's node holds its outputs' buffers until it finishes, so they never look
// donatable. Writing in place is safe wherever no other cache writes the same buffer: every
// other holder (an earlier step, a view of the first positions) reads only positions below
// the ones written.

#include <algorithm>
#include <initializer_list>
#include <cstring>
#include <sstream>
#include <utility>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/c/error.h"
#include "mlx/c/private/mlx.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "mlx/backend/common/utils.h"
#include "cpu_steps.h"
#include "shim.h"
#include "vmath.h"

// The layer's configuration, as the Rust side passes it.
struct MlxdLayerSpec {
  int32_t heads;
  int32_t kv_heads;
  // Every norm's epsilon (the layer's two and the q/k norms).
  float eps;
  // The attention's query scale.
  float scale;
  // A kv head's query heads in one product (see fast_ops.cpp's decode attention).
  bool group_heads;
  bool qkv_bias;
  bool qk_norm;
  int32_t bits;
  int32_t group;
  // `MlxdMode`: affine, or a float mode, whose weights have no biases (their slot holds the
  // scales again, never read as biases).
  int32_t mode;
  int32_t rope_dims;
  bool rope_traditional;
  float rope_base;
  float rope_scale;
  bool rope_freqs;
  // The most rows the kernel computes with the bits of each row alone (its few-row kernels):
  // a step of several positions per row multiplies in chunks of this many rows, so each
  // position has the bits of a decode step there.
  int32_t alone_rows;
  // The same for the BLAS that multiplies the attention's queries (1 where it gives no such
  // promise): a row's positions share a head's products up to this many query rows.
  int32_t alone_queries;
};

namespace {

using namespace mlx::core;

constexpr const char* LAYER = "mlxd_decode_layer";

// Where the weights every layer has sit in its weights (a packed weight takes three).
namespace slot {
constexpr size_t ATTN_NORM = 0, Q = 1, K = 4, V = 7, O = 10, MLP_NORM = 13, GATE = 14, UP = 17,
                 DOWN = 20, FIXED = 23;
}

// Where the optional weights sit, after the fixed ones, and how many there are in all.
struct Slots {
  size_t qkv_bias;
  size_t qk_norm;
  size_t freqs;
  size_t count;

  explicit Slots(const MlxdLayerSpec& s) {
    size_t at = slot::FIXED;
    qkv_bias = at;
    at += s.qkv_bias ? 3 : 0;
    qk_norm = at;
    at += s.qk_norm ? 2 : 0;
    freqs = at;
    at += s.rope_freqs ? 1 : 0;
    count = at;
  }
};

// A layer's weights and configuration, checked once; every step's node holds them.
struct Layer {
  MlxdLayerSpec spec;
  Slots slots;
  // The hidden size and the head width.
  int64_t d;
  int64_t head_dim;
  std::vector<array> w;
};

mlxd::RopeParams rope_params(const MlxdLayerSpec& s) {
  return {s.rope_dims, s.rope_traditional, s.rope_base, s.rope_scale, s.rope_freqs};
}

// Scratch the stream thread keeps between steps (a step's activations, a few KB per row).
struct Scratch {
  std::vector<float> normed, q, k, v, queries, attended, projected, gate, up, x;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One step of the layer as the stream thread runs it.
struct LayerRun {
  std::shared_ptr<const Layer> layer;
  const MlxdLayerSpec& spec;
  std::vector<int32_t> offsets;
  // New positions per row.
  int64_t length;
  mlxd_qmm_parts_kernel kernel;
  // The step's inputs: x, then each row's key and value buffers.
  std::vector<array> inputs;
  std::vector<array> outputs;
  // Outputs (cache buffers) that hold a copy of their input, made before the step writes.
  std::vector<size_t> copies;

  const float* f32(size_t at) const {
    return layer->w[at].data<float>();
  }

  // Rows of the products: every row's every new position.
  int64_t rows() const {
    return static_cast<int64_t>(offsets.size()) * length;
  }

  // y_i [rows, N_i] = x [rows, K] times the packed weight at `at_i`, for weights that share x
  // (q, k and v; gate and up) as one product where their scales share a dtype, each output
  // with the bits of its own product node (one position per row), or in chunks of rows that
  // each keep a row's bits alone.
  void products(const float* x, std::initializer_list<std::pair<size_t, float*>> parts) const {
    const size_t first = parts.begin()->first;
    const int64_t k = int64_t(layer->w[first].shape(1)) * 32 / spec.bits, all = rows();
    const int64_t chunk = length == 1 ? all : spec.alone_rows;
    const int32_t params = mlxd::packed_params_code(layer->w[first + 1].dtype());
    bool one = true;
    for (const auto& part : parts) {
      one = one && mlxd::packed_params_code(layer->w[part.first + 1].dtype()) == params;
    }
    std::vector<MlxdPart> p;
    for (int64_t r = 0; r < all; r += chunk) {
      const int64_t m = std::min(chunk, all - r);
      p.clear();
      for (const auto& [at, y] : parts) {
        const array &w = layer->w[at], &scales = layer->w[at + 1];
        const void* biases = spec.mode == MLXD_AFFINE ? layer->w[at + 2].data<void>() : nullptr;
        const int64_t n = w.shape(0);
        p.push_back({w.data<uint8_t>(), scales.data<void>(), biases, n, y + r * n});
        if (!one) {
          kernel(x + r * k, m, k, &p.back(), 1, mlxd::packed_params_code(scales.dtype()),
                 spec.bits, spec.group, spec.mode);
        }
      }
      if (one) {
        kernel(x + r * k, m, k, p.data(), static_cast<int32_t>(p.size()), params, spec.bits,
               spec.group, spec.mode);
      }
    }
  }

  void run();
  void copy_caches();
  void project_qkv(Scratch& s, const float* x, int64_t head_dim);
  mlxd::Attend place_position(Scratch& s, int64_t b, int64_t j, int64_t head_dim);
  void attend(Scratch& s, int64_t head_dim);
  void mlp(Scratch& s, float* h);
};

// y[r] += b for each of `rows` rows of n (a bias, as MLX's broadcast add).
void add_rows(float* y, const float* b, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t i = 0; i < n; i++) {
      y[r * n + i] = y[r * n + i] + b[i];
    }
  }
}

// h = x + y over n values (a residual, as MLX's add; `h` may be `x`).
void add_residual(float* h, const float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    h[i] = x[i] + y[i];
  }
}

void LayerRun::copy_caches() {
  for (size_t i : copies) {
    const array& in = inputs[i];
    std::vector<float> keep;
    const float* src = mlxd_row_major(in, keep);
    std::memcpy(outputs[i].data<float>(), src, in.nbytes());
  }
}

// Norm, q/k/v products, biases and q/k norms: the heads before their rope.
void LayerRun::project_qkv(Scratch& s, const float* x, int64_t head_dim) {
  const int64_t b = rows(), d = layer->d;
  const int64_t nq = spec.heads * head_dim, nkv = spec.kv_heads * head_dim;
  s.normed.resize(b * d);
  s.q.resize(b * nq);
  s.k.resize(b * nkv);
  s.v.resize(b * nkv);
  mlxd::rms_norm_rows(x, f32(slot::ATTN_NORM), s.normed.data(), b, d, spec.eps);
  products(s.normed.data(), {{slot::Q, s.q.data()}, {slot::K, s.k.data()}, {slot::V, s.v.data()}});
  if (spec.qkv_bias) {
    const size_t at = layer->slots.qkv_bias;
    add_rows(s.q.data(), f32(at), b, nq);
    add_rows(s.k.data(), f32(at + 1), b, nkv);
    add_rows(s.v.data(), f32(at + 2), b, nkv);
  }
  if (spec.qk_norm) {
    const size_t at = layer->slots.qk_norm;
    mlxd::rms_norm_rows(s.q.data(), f32(at), s.q.data(), b * spec.heads, head_dim, spec.eps);
    mlxd::rms_norm_rows(s.k.data(), f32(at + 1), s.k.data(), b * spec.kv_heads, head_dim,
                        spec.eps);
  }
}

// Row b's new position j (r = b * length + j of the products, position p = offsets[b] + j):
// rope on its query (scaled, into `queries`) and key, the key and value into the row's cache
// at p, and its attention over positions 0..=p, into `attended`, to run. Its keys stop at p,
// so the later positions written before it runs are not among them.
mlxd::Attend LayerRun::place_position(Scratch& s, int64_t b, int64_t j, int64_t d) {
  const int64_t heads = spec.heads, kv_heads = spec.kv_heads, pos = offsets[b] + j;
  const int64_t r = b * length + j;
  const mlxd::RopeParams p = rope_params(spec);
  const float* freqs = spec.rope_freqs ? f32(layer->slots.freqs) : nullptr;
  const std::vector<float> inv = mlxd::inv_freqs(p, freqs);
  std::vector<float> cos_t(p.dims / 2), sin_t(p.dims / 2);
  mlxd::rope_angles((0.0f + static_cast<float>(pos)) * p.scale, p, inv.data(), cos_t.data(),
                    sin_t.data());
  float* queries = s.queries.data() + r * heads * d;
  mlxd::rotate_heads({s.q.data() + r * heads * d, d, 1, queries, d}, heads, d, p, cos_t.data(),
                     sin_t.data());
  for (int64_t i = 0; i < heads * d; i++) {
    queries[i] = spec.scale * queries[i];
  }
  array &keys = outputs[1 + 2 * b], &values = outputs[2 + 2 * b];
  const int64_t head_stride = keys.shape(2) * d;
  float* kc = keys.data<float>();
  float* vc = values.data<float>();
  mlxd::rotate_heads({s.k.data() + r * kv_heads * d, d, 1, kc + pos * d, head_stride}, kv_heads,
                     d, p, cos_t.data(), sin_t.data());
  for (int64_t g = 0; g < kv_heads; g++) {
    std::memcpy(vc + g * head_stride + pos * d, s.v.data() + (r * kv_heads + g) * d,
                d * sizeof(float));
  }
  mlxd::HeadRows k{kc, kv_heads, pos + 1, d, head_stride, d};
  mlxd::HeadRows v{vc, kv_heads, pos + 1, d, head_stride, d};
  return {queries, k, v, s.attended.data() + r * heads * d};
}

// h += down(silu(gate(norm(h))) * up(norm(h))).
void LayerRun::mlp(Scratch& s, float* h) {
  const int64_t b = rows(), d = layer->d, inter = layer->w[slot::GATE].shape(0);
  s.gate.resize(b * inter);
  s.up.resize(b * inter);
  s.projected.resize(b * d);
  mlxd::rms_norm_rows(h, f32(slot::MLP_NORM), s.normed.data(), b, d, spec.eps);
  products(s.normed.data(), {{slot::GATE, s.gate.data()}, {slot::UP, s.up.data()}});
  mlxd_vmath().silu_mul(s.gate.data(), s.up.data(), b * inter);
  products(s.gate.data(), {{slot::DOWN, s.projected.data()}});
  add_residual(h, h, s.projected.data(), b * d);
}

// Each row's new positions placed (rope, cache write), then attended, a row's positions
// sharing a head's products in chunks the attention's BLAS keeps each row's bits alone in.
void LayerRun::attend(Scratch& s, int64_t head_dim) {
  const mlxd::AttendPlan plan{spec.group_heads, spec.alone_queries};
  const int64_t chunk = mlxd::positions_per_product(plan, spec.heads / spec.kv_heads);
  const int64_t q_stride = spec.heads * head_dim;
  std::vector<mlxd::Attend> attend;
  attend.reserve(offsets.size());
  for (int64_t row = 0; row < static_cast<int64_t>(offsets.size()); row++) {
    for (int64_t j0 = 0; j0 < length; j0 += chunk) {
      const int64_t j1 = std::min(length, j0 + chunk);
      mlxd::Attend first = place_position(s, row, j0, head_dim);
      for (int64_t j = j0 + 1; j < j1; j++) {
        // The chunk's last position: its keys run through the chunk.
        const mlxd::Attend last = place_position(s, row, j, head_dim);
        first.k = last.k;
        first.v = last.v;
      }
      first.positions = j1 - j0;
      first.q_stride = first.out_stride = q_stride;
      attend.push_back(first);
    }
  }
  mlxd::attend_rows(attend, spec.heads, plan);
}

void LayerRun::run() {
  copy_caches();
  Scratch& s = scratch();
  const int64_t b = rows(), d = layer->d, head_dim = layer->head_dim;
  const float* x = mlxd_row_major(inputs[0], s.x);
  project_qkv(s, x, head_dim);
  s.queries.resize(b * spec.heads * head_dim);
  s.attended.resize(b * spec.heads * head_dim);
  attend(s, head_dim);
  float* h = outputs[0].data<float>();
  s.projected.resize(b * d);
  products(s.attended.data(), {{slot::O, s.projected.data()}});
  add_residual(h, x, s.projected.data(), b * d);
  mlp(s, h);
}

template <typename F>
void check(bool ok, F&& what) {
  mlxd_check(ok, LAYER, std::forward<F>(what));
}

// The kernels read weights, norms and biases as they lie: loaded weights are row-contiguous.
void check_contiguous(const array& a) {
  check(a.flags().row_contiguous, "a weight is not row-contiguous");
}

class DecodeLayerCpu : public Primitive {
 public:
  DecodeLayerCpu(Stream stream, std::shared_ptr<const Layer> layer, std::vector<int32_t> offsets,
                 std::vector<bool> exclusive, mlxd_qmm_parts_kernel kernel)
      : Primitive(stream),
        layer_(std::move(layer)),
        offsets_(std::move(offsets)),
        exclusive_(std::move(exclusive)),
        kernel_(kernel) {}

  void eval_gpu(const std::vector<array>&, std::vector<array>&) override {
    throw std::runtime_error("[MlxdDecodeLayer] runs on the CPU only");
  }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override;

  const char* name() const override {
    return "MlxdDecodeLayer";
  }

  // Never merged with another node: each one writes its own caches' new position.
  bool is_equivalent(const Primitive&) const override {
    return false;
  }

  std::vector<Shape> output_shapes(const std::vector<array>& inputs) override {
    std::vector<Shape> shapes;
    for (const array& in : inputs) {
      shapes.push_back(in.shape());
    }
    return shapes;
  }

 private:
  std::shared_ptr<const Layer> layer_;
  std::vector<int32_t> offsets_;
  std::vector<bool> exclusive_;
  mlxd_qmm_parts_kernel kernel_;
};

void DecodeLayerCpu::eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) {
  auto& encoder = cpu::get_command_encoder(stream());
  const int64_t length = inputs[0].shape(1);
  LayerRun run{layer_, layer_->spec, offsets_, length, kernel_, {}, {}, {}};
  for (auto& in : inputs) {
    encoder.set_input_array(in);
    run.inputs.push_back(array::unsafe_weak_copy(in));
  }
  outputs[0].set_data(allocator::malloc(outputs[0].nbytes()));
  for (size_t i = 1; i < outputs.size(); i++) {
    const array& cache = inputs[i];
    const bool whole = cache.flags().row_contiguous && cache.data_size() == cache.size();
    if (exclusive_[(i - 1) / 2] && whole) {
      outputs[i].copy_shared_buffer(cache);
    } else {
      outputs[i].set_data(allocator::malloc(outputs[i].nbytes()));
      run.copies.push_back(i);
    }
  }
  for (auto& out : outputs) {
    encoder.set_output_array(out);
    run.outputs.push_back(array::unsafe_weak_copy(out));
  }
  encoder.dispatch([run = std::move(run)]() mutable { run.run(); });
}

std::string describe(const array& a) {
  std::ostringstream s;
  s << a.dtype() << " " << a.shape();
  return s.str();
}

// A float32 vector [n] (a norm's weight, a bias, the rope's frequencies).
void check_vector(const array& a, int64_t n, const char* what) {
  check(a.dtype() == float32 && a.ndim() == 1 && a.shape(0) == n, [&] {
    return std::string(what) + " must be float32 [" + std::to_string(n) + "], not " + describe(a);
  });
}

// The packed weight at `at`: n outputs of k inputs.
void check_weight(const std::vector<array>& w, size_t at, int64_t k, int64_t n, const char* what,
                  const MlxdLayerSpec& s) {
  const array* biases = s.mode == MLXD_AFFINE ? &w[at + 2] : nullptr;
  mlxd::validate_packed(LAYER, k, w[at], w[at + 1], biases, s.group, s.bits, s.mode);
  check(w[at].shape(0) == n, [&] {
    return std::string(what) + " must have " + std::to_string(n) + " outputs, not " +
        std::to_string(w[at].shape(0));
  });
}

// Every weight's dtype and shape, so the stream thread can trust every size.
void check_weights(const std::vector<array>& w, const MlxdLayerSpec& s, int64_t d,
                   int64_t head_dim) {
  const int64_t nq = s.heads * head_dim, nkv = s.kv_heads * head_dim;
  check(w[slot::GATE].ndim() == 2, "gate must be a 2-D packed weight");
  const int64_t inter = w[slot::GATE].shape(0);
  check_vector(w[slot::ATTN_NORM], d, "the attention norm");
  check_vector(w[slot::MLP_NORM], d, "the MLP norm");
  check_weight(w, slot::Q, d, nq, "q", s);
  check_weight(w, slot::K, d, nkv, "k", s);
  check_weight(w, slot::V, d, nkv, "v", s);
  check_weight(w, slot::O, nq, d, "o", s);
  check_weight(w, slot::GATE, d, inter, "gate", s);
  check_weight(w, slot::UP, d, inter, "up", s);
  check_weight(w, slot::DOWN, inter, d, "down", s);
  Slots slots(s);
  if (s.qkv_bias) {
    check_vector(w[slots.qkv_bias], nq, "the q bias");
    check_vector(w[slots.qkv_bias + 1], nkv, "the k bias");
    check_vector(w[slots.qkv_bias + 2], nkv, "the v bias");
  }
  if (s.qk_norm) {
    check_vector(w[slots.qk_norm], head_dim, "the q norm");
    check_vector(w[slots.qk_norm + 1], head_dim, "the k norm");
  }
  if (s.rope_freqs) {
    check_vector(w[slots.freqs], s.rope_dims / 2, "the rope frequencies");
  }
}

// A rope the head can take.
void check_spec(const MlxdLayerSpec& s, int64_t head_dim) {
  check(s.alone_rows > 0, "the kernel's rows alone must be positive");
  check(s.alone_queries > 0, "the attention's query rows alone must be positive");
  check(s.rope_dims > 0 && s.rope_dims % 2 == 0 && s.rope_dims <= head_dim,
        [&] {
          return "rope dims " + std::to_string(s.rope_dims) +
              " must be even, positive and at most " + std::to_string(head_dim);
        });
}

// The layer from its weights (evaluated here, so a step can read them), checked.
std::shared_ptr<const Layer> make_layer(std::vector<array> w, const MlxdLayerSpec& s) {
  check(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0,
        [&] {
          return "heads " + std::to_string(s.heads) + " must be a positive multiple of kv heads " +
              std::to_string(s.kv_heads);
        });
  Slots slots(s);
  check(w.size() == slots.count, [&] {
    return std::to_string(w.size()) + " weights where the layer takes " +
        std::to_string(slots.count);
  });
  check(w[slot::Q].ndim() == 2 && w[slot::Q].shape(0) % s.heads == 0,
        "q must have heads * head_dim outputs");
  check(w[slot::ATTN_NORM].ndim() == 1, "the attention norm must be a vector");
  const int64_t d = w[slot::ATTN_NORM].shape(0), head_dim = w[slot::Q].shape(0) / s.heads;
  check_spec(s, head_dim);
  check_weights(w, s, d, head_dim);
  eval(w);
  for (const array& a : w) {
    check_contiguous(a);
  }
  mlxd::require_sgemm();
  return std::make_shared<const Layer>(Layer{s, slots, d, head_dim, std::move(w)});
}

// Row b's buffers: [1, kv_heads, capacity >= offset + length, head_dim] f32 each.
void check_caches(const std::vector<array>& in, const Layer& l,
                  const std::vector<int32_t>& offsets, int64_t length) {
  check(in.size() == 1 + 2 * offsets.size(), "one key and one value buffer per row");
  for (size_t b = 0; b < offsets.size(); b++) {
    for (const array& c : {in[1 + 2 * b], in[2 + 2 * b]}) {
      check(c.dtype() == float32 && c.ndim() == 4 && c.shape(0) == 1 &&
                c.shape(1) == l.spec.kv_heads && c.shape(3) == l.head_dim,
            [&] {
              return "row " + std::to_string(b) + "'s cache must be float32 [1, " +
                  std::to_string(l.spec.kv_heads) + ", capacity, " +
                  std::to_string(l.head_dim) + "], not " + describe(c);
            });
      check(offsets[b] >= 0 && offsets[b] + length <= c.shape(2),
            [&] {
              const std::string last = std::to_string(offsets[b] + length - 1);
              return "row " + std::to_string(b) + " writes position" +
                  (length == 1 ? " " : "s " + std::to_string(offsets[b]) + "..") + last +
                  " of a cache of " + std::to_string(c.shape(2));
            });
    }
  }
}

// Row b writes from position offsets[b] of its buffers, in place when exclusive[b].
struct Rows {
  std::vector<int32_t> offsets;
  std::vector<bool> exclusive;
};

// The step's node over x and the caches (`inputs`).
std::vector<array> decode_layer_cpu(const std::vector<array>& inputs,
                                    std::shared_ptr<const Layer> layer, Rows rows,
                                    mlxd_qmm_parts_kernel kernel, Stream stream) {
  auto& offsets = rows.offsets;
  check(kernel != nullptr, "no kernel");
  const array& x = inputs[0];
  check(x.dtype() == float32 && x.ndim() == 3 && x.shape(1) >= 1 && x.shape(2) == layer->d &&
            x.shape(0) == static_cast<int>(offsets.size()) && !offsets.empty(),
        [&] {
          return "x must be float32 [B, L, " + std::to_string(layer->d) +
              "] with one offset per row, not " + describe(x) + " with " +
              std::to_string(offsets.size());
        });
  check_caches(inputs, *layer, offsets, x.shape(1));
  std::vector<Shape> shapes;
  for (const array& in : inputs) {
    shapes.push_back(in.shape());
  }
  std::vector<Dtype> dtypes(shapes.size(), float32);
  return array::make_arrays(
      std::move(shapes), dtypes,
      std::make_shared<DecodeLayerCpu>(stream, std::move(layer), std::move(offsets),
                                       std::move(rows.exclusive), kernel),
      inputs);
}

} // namespace

// A layer's weights, checked once and shared by every step's node.
struct MlxdLayer {
  std::shared_ptr<const Layer> layer;
};

// The layer of `count` weights in the order at the top of this file, into `*out` (freed by
// `mlxd_layer_free`).
extern "C" int mlxd_layer_new(MlxdLayer** out, const mlx_array* weights, int count,
                              const MlxdLayerSpec* spec) {
  return mlxd_guarded([&] {
    std::vector<array> w;
    for (int i = 0; i < count; i++) {
      w.push_back(mlx_array_get_(weights[i]));
    }
    *out = new MlxdLayer{make_layer(std::move(w), *spec)};
  });
}

// Steps still running keep the weights until they finish.
extern "C" void mlxd_layer_free(MlxdLayer* layer) {
  delete layer;
}

// The layer's decode step over x [B, L, D] and one key and one value buffer per row (`caches`, 2 *
// `rows`), one offset and one `exclusive` per row: the output, then each row's buffers.
extern "C" int mlxd_decode_layer(
    mlx_vector_array* res,
    const MlxdLayer* layer,
    const mlx_array x,
    const mlx_array* caches,
    const int32_t* offsets,
    const bool* exclusive,
    int rows,
    mlxd_qmm_parts_kernel kernel,
    const mlx_stream s) {
  return mlxd_guarded([&] {
    check(layer != nullptr, "no layer");
    std::vector<array> ins{mlx_array_get_(x)};
    for (int i = 0; i < 2 * rows; i++) {
      ins.push_back(mlx_array_get_(caches[i]));
    }
    Rows r{std::vector<int32_t>(offsets, offsets + rows),
           std::vector<bool>(exclusive, exclusive + rows)};
    mlx_vector_array_set_(*res, decode_layer_cpu(ins, layer->layer, std::move(r), kernel,
                                                 mlx_stream_get_(s)));
  });
}
