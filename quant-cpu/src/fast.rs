//! MLX's `fast::rms_norm` and `fast::rope` as one graph node each on the CPU
//! (`cpp/fast_ops.cpp`), with the bits of MLX's own CPU path.
//!
//! On the CPU, MLX builds each fast op from its fallback of plain ops: about 10 nodes for an
//! RMS norm and 30 for a rope. A decode step of a small model costs per node (building,
//! scheduling and allocating each one), not per flop, so these two took most of a step's
//! ~3,700 nodes. The nodes here compute exactly what the fallbacks compute, with MLX's own
//! scalar functions, so a model's output does not change by a bit; f32 only.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream};

extern "C" {
    fn mlxd_rms_norm(
        res: *mut mlx_sys::mlx_array,
        x: mlx_sys::mlx_array,
        weight: mlx_sys::mlx_array,
        eps: f32,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    #[allow(clippy::too_many_arguments)]
    fn mlxd_rope(
        res: *mut mlx_sys::mlx_array,
        x: mlx_sys::mlx_array,
        offsets: mlx_sys::mlx_array,
        freqs: mlx_sys::mlx_array,
        has_freqs: bool,
        dims: i32,
        traditional: bool,
        base: f32,
        scale: f32,
        stream: mlx_sys::mlx_stream,
    ) -> i32;
}

/// `x` ([..., D] f32) over its RMS along D, times `weight` ([D] f32): `fast::rms_norm`.
pub fn rms_norm(x: &Array, weight: &Array, eps: f32) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_rms_norm(res, x.as_ptr(), weight.as_ptr(), eps, stream.as_ptr())
    })
}

/// How a rope rotates, as `fast::rope` takes it.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec<'a> {
    /// Leading dims of each head that rotate (even); the rest pass through.
    pub dims: i32,
    /// Adjacent pairs (2j, 2j+1) instead of halves (j, j + dims/2).
    pub traditional: bool,
    /// Frequencies base^(-2j/dims) from `base`, or `freqs` ([dims/2] f32) when given.
    pub base: f32,
    pub freqs: Option<&'a Array>,
    /// Positions are multiplied by it.
    pub scale: f32,
}

/// `x` ([B, heads, L, D] f32) rotated for positions from `offsets` (int32: one, or one per
/// row b): `fast::rope` (or `rope_dynamic`).
pub fn rope(x: &Array, offsets: &Array, spec: &RopeSpec) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    // mlx-c's "no array": the shim reads `freqs` only when `has_freqs`.
    let none = mlx_sys::mlx_array {
        ctx: std::ptr::null_mut(),
    };
    let freqs = spec.freqs.map_or(none, Array::as_ptr);
    // SAFETY: every handle is a live mlx-rs object (or unread); mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_rope(
            res,
            x.as_ptr(),
            offsets.as_ptr(),
            freqs,
            spec.freqs.is_some(),
            spec.dims,
            spec.traditional,
            spec.base,
            spec.scale,
            stream.as_ptr(),
        )
    })
}
