//! A dense decoder layer's decode step (a few new positions per row, each as a decode step
//! there) as one node on the CPU (`cpp/decode_layer.cpp`).
//!
//! Built op by op, a layer's step is about 23 graph nodes, and a small model's decode step
//! costs per node (building, scheduling and allocating each), not per flop. This node runs the
//! same steps in the same order, with the same code, so its output and cache writes have the
//! bits of the nodes it replaces: RMS norm, the packed q/k/v products (affine, or one of MLX's
//! float modes) and biases, q/k norms, rope, the cache write, MLX's attention of one query
//! position, the o product and residual, then the norm, SwiGLU, down product and residual.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream};

use crate::fast::RopeSpec;
use crate::op::{mode_code, parts_kernel_for, PartsKernel};
use crate::{Format, Mode, QuantWeight};

/// The layer's configuration as the shim reads it (`MlxdLayerSpec` in the C++).
#[repr(C)]
struct Spec {
    heads: i32,
    kv_heads: i32,
    eps: f32,
    scale: f32,
    group_heads: bool,
    qkv_bias: bool,
    qk_norm: bool,
    bits: i32,
    group: i32,
    /// `MlxdMode`: affine, or a float mode (no biases).
    mode: i32,
    rope_dims: i32,
    rope_traditional: bool,
    rope_base: f32,
    rope_scale: f32,
    rope_freqs: bool,
    alone_rows: i32,
    alone_queries: i32,
}

/// `MlxdLayer` in the C++: a layer's weights, checked once, shared by every step's node.
#[repr(C)]
struct RawLayer {
    _private: [u8; 0],
}

extern "C" {
    fn mlxd_layer_new(
        out: *mut *mut RawLayer,
        weights: *const mlx_sys::mlx_array,
        count: i32,
        spec: *const Spec,
    ) -> i32;
    fn mlxd_layer_free(layer: *mut RawLayer);
    #[allow(clippy::too_many_arguments)]
    fn mlxd_decode_layer(
        res: *mut mlx_sys::mlx_vector_array,
        layer: *const RawLayer,
        x: mlx_sys::mlx_array,
        caches: *const mlx_sys::mlx_array,
        offsets: *const i32,
        exclusive: *const bool,
        rows: i32,
        kernel: PartsKernel,
        stream: mlx_sys::mlx_stream,
    ) -> i32;
}

/// A layer's weights, all packed in one format (affine with biases, or a float mode without);
/// norms, biases and frequencies f32.
pub struct LayerWeights<'a> {
    pub attention_norm: &'a Array,
    pub q: QuantWeight<'a>,
    pub k: QuantWeight<'a>,
    pub v: QuantWeight<'a>,
    pub o: QuantWeight<'a>,
    pub mlp_norm: &'a Array,
    pub gate: QuantWeight<'a>,
    pub up: QuantWeight<'a>,
    pub down: QuantWeight<'a>,
    /// q, k and v biases (Qwen2).
    pub qkv_bias: Option<[&'a Array; 3]>,
    /// RMS norms of each q and k head (Qwen3).
    pub qk_norm: Option<[&'a Array; 2]>,
}

/// What the layer's config decides.
#[derive(Clone, Copy)]
pub struct LayerShape<'a> {
    pub heads: i32,
    pub kv_heads: i32,
    /// Every norm's epsilon.
    pub eps: f32,
    /// The attention's query scale.
    pub scale: f32,
    pub rope: RopeSpec<'a>,
    pub format: Format,
}

/// One row's cache: key and value buffers [1, kv_heads, capacity, head_dim] f32 and the
/// first position the step writes (the step's positions all below the capacity).
pub struct RowCache<'a> {
    pub keys: &'a Array,
    pub values: &'a Array,
    pub offset: i32,
    /// No other cache writes these buffers, so the step writes its positions in place (else
    /// into a copy). Every other holder must read only positions below `offset`.
    pub exclusive: bool,
}

/// A layer made into the node's form once: its weights (evaluated) and configuration, checked.
/// Each step's node shares them, so a step's graph holds only x and the caches: a node's
/// every input costs the engine thread per step, and most of a layer's were weights.
pub struct LayerNode {
    raw: std::ptr::NonNull<RawLayer>,
    /// The products' kernel (q/k/v and gate/up as parts of one), of the weights' numerics.
    kernel: PartsKernel,
}

// SAFETY: the C++ layer is immutable once made, and its weights are MLX arrays shared through
// reference counts that are atomic.
unsafe impl Send for LayerNode {}
unsafe impl Sync for LayerNode {}

impl Drop for LayerNode {
    fn drop(&mut self) {
        // SAFETY: made by `mlxd_layer_new`, freed once; steps in flight hold their own share.
        unsafe { mlxd_layer_free(self.raw.as_ptr()) }
    }
}

impl LayerNode {
    /// The layer, or an error naming the weight or setting the node does not take.
    pub fn new(w: &LayerWeights, shape: &LayerShape) -> Result<LayerNode, Exception> {
        check_biases(w, shape.format.mode)?;
        let handles = weight_handles(w, shape);
        let spec = spec(w, shape);
        let mut raw = std::ptr::null_mut();
        // SAFETY: every handle is a live mlx-rs array; the shim copies what it keeps.
        mlx_rs::raw::try_status_op("layer node", || unsafe {
            mlxd_layer_new(&mut raw, handles.as_ptr(), handles.len() as i32, &spec)
        })?;
        let raw = std::ptr::NonNull::new(raw)
            .ok_or_else(|| Exception::custom("the layer node was not made"))?;
        let kernel = parts_kernel_for(shape.format);
        crate::share_steps();
        Ok(LayerNode { raw, kernel })
    }

    /// The step for x [B, L, D] f32, row b's L new positions going to `rows[b]` from its
    /// offset: the output [B, L, D] and each row's (keys, values) buffers with those positions
    /// written. Position p attends over positions 0..=p of its row's buffers, with the bits a
    /// decode step of one position there has.
    pub fn step(
        &self,
        x: &Array,
        rows: &[RowCache],
    ) -> Result<(Array, Vec<(Array, Array)>), Exception> {
        let stream = Stream::thread_local_or_default();
        let caches: Vec<_> = rows
            .iter()
            .flat_map(|r| [r.keys.as_ptr(), r.values.as_ptr()])
            .collect();
        let offsets: Vec<i32> = rows.iter().map(|r| r.offset).collect();
        let exclusive: Vec<bool> = rows.iter().map(|r| r.exclusive).collect();
        // SAFETY: the layer is live, every handle is a live mlx-rs object; the shim copies
        // what it keeps; `caches`, `offsets` and `exclusive` outlive the call.
        let mut out = mlx_rs::raw::try_vector_array_op(|res| unsafe {
            mlxd_decode_layer(
                res,
                self.raw.as_ptr(),
                x.as_ptr(),
                caches.as_ptr(),
                offsets.as_ptr(),
                exclusive.as_ptr(),
                offsets.len() as i32,
                self.kernel,
                stream.as_ptr(),
            )
        })?
        .into_iter();
        let h = out
            .next()
            .ok_or_else(|| Exception::custom("the layer node gave no output"))?;
        let mut written = Vec::with_capacity(rows.len());
        while let (Some(k), Some(v)) = (out.next(), out.next()) {
            written.push((k, v));
        }
        Ok((h, written))
    }
}

/// One step through a layer made for it alone (tests; a model keeps its `LayerNode`).
pub fn decode_layer(
    x: &Array,
    w: &LayerWeights,
    shape: &LayerShape,
    rows: &[RowCache],
) -> Result<(Array, Vec<(Array, Array)>), Exception> {
    LayerNode::new(w, shape)?.step(x, rows)
}

fn spec(w: &LayerWeights, shape: &LayerShape) -> Spec {
    // A kv head's query heads in one product where the BLAS keeps each row's bits alone.
    let repeats = match shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0 {
        true => (shape.heads / shape.kv_heads) as usize,
        false => 1,
    };
    Spec {
        heads: shape.heads,
        kv_heads: shape.kv_heads,
        eps: shape.eps,
        scale: shape.scale,
        group_heads: skinny_gemm::rows_alone(repeats),
        qkv_bias: w.qkv_bias.is_some(),
        qk_norm: w.qk_norm.is_some(),
        bits: shape.format.bits as i32,
        group: shape.format.group as i32,
        mode: mode_code(shape.format.mode),
        rope_dims: shape.rope.dims,
        rope_traditional: shape.rope.traditional,
        rope_base: shape.rope.base,
        rope_scale: shape.rope.scale,
        rope_freqs: shape.rope.freqs.is_some(),
        alone_rows: crate::kernel::PANEL_ROWS as i32,
        alone_queries: skinny_gemm::max_rows_alone() as i32,
    }
}

/// Biases on every packed weight in the affine mode, on none in a float mode, or an error
/// naming the first weight that breaks it.
fn check_biases(w: &LayerWeights, mode: Mode) -> Result<(), Exception> {
    let weights = [
        ("q", &w.q),
        ("k", &w.k),
        ("v", &w.v),
        ("o", &w.o),
        ("gate", &w.gate),
        ("up", &w.up),
        ("down", &w.down),
    ];
    let affine = mode == Mode::Affine;
    match weights.iter().find(|(_, p)| p.biases.is_some() != affine) {
        None => Ok(()),
        Some((name, _)) if affine => Err(Exception::custom(format!(
            "the layer's {name} weight has no biases, which affine weights need"
        ))),
        Some((name, _)) => Err(Exception::custom(format!(
            "the layer's {name} weight has biases, which {mode} weights do not"
        ))),
    }
}

/// The layer's weights in the shim's order. A float mode's biases slot holds its scales, which
/// the shim does not read as biases (the spec's mode says there are none).
fn weight_handles(w: &LayerWeights, shape: &LayerShape) -> Vec<mlx_sys::mlx_array> {
    let packed = |p: &QuantWeight| {
        let biases = p.biases.unwrap_or(p.scales);
        [p.w.as_ptr(), p.scales.as_ptr(), biases.as_ptr()]
    };
    let mut h = vec![w.attention_norm.as_ptr()];
    for p in [&w.q, &w.k, &w.v, &w.o] {
        h.extend(packed(p));
    }
    h.push(w.mlp_norm.as_ptr());
    for p in [&w.gate, &w.up, &w.down] {
        h.extend(packed(p));
    }
    h.extend(w.qkv_bias.iter().flatten().map(|a| a.as_ptr()));
    h.extend(w.qk_norm.iter().flatten().map(|a| a.as_ptr()));
    h.extend(shape.rope.freqs.map(Array::as_ptr));
    h
}
