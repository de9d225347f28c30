//! MLX's `fast::rms_norm`, `fast::rope`, decode-time `fast::scaled_dot_product_attention` and
//! `logsumexp` as one graph node each on the CPU (`cpp/fast_ops.cpp`), with the bits of MLX's
//! own CPU path.
//!
//! On the CPU, MLX builds each fast op from its fallback of plain ops: about 10 nodes for an
//! RMS norm and 30 for a rope. A decode step of a small model costs per node (building,
//! scheduling and allocating each one), not per flop, so these two took most of a step's
//! ~3,700 nodes; the attention fallback is another dozen per layer. The nodes here compute
//! exactly what the fallbacks compute, with MLX's own scalar functions or their vectorized
//! twins (`cpp/vmath.h`, tested bit for bit against them), so a model's output does not change
//! by a bit; f32 only.

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream};

use crate::kernel::attention::{attend_causal, Side};
use crate::Numerics;

/// `mlxd::HeadRows` in the C++: one side of a sequence's cache.
#[repr(C)]
struct HeadRows {
    data: *const f32,
    heads: i64,
    len: i64,
    width: i64,
    head_stride: i64,
    row_stride: i64,
}

/// `MlxdCausalKernel` in the C++ (null: MLX's attention).
type CausalKernel =
    Option<unsafe extern "C" fn(*const f32, i64, i64, *const HeadRows, *const HeadRows, *mut f32)>;

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

    fn mlxd_decode_attention(
        res: *mut mlx_sys::mlx_array,
        queries: mlx_sys::mlx_array,
        kv: *const mlx_sys::mlx_array,
        rows: i32,
        scale: f32,
        group_heads: bool,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    fn mlxd_causal_attention(
        res: *mut mlx_sys::mlx_array,
        queries: mlx_sys::mlx_array,
        keys: mlx_sys::mlx_array,
        values: mlx_sys::mlx_array,
        scale: f32,
        kernel: CausalKernel,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    fn mlxd_logsumexp(
        res: *mut mlx_sys::mlx_array,
        x: mlx_sys::mlx_array,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    fn mlxd_vmath_table(which: i32, out: *mut Vmath) -> bool;
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

/// One query position per row attending over that row's own cache: `queries` [B, heads, 1, d]
/// f32 and `rows[b]` = (keys [1, kv_heads, T_b, d], values [1, kv_heads, T_b, dv]), f32;
/// [B, heads, 1, dv] out. Row b has the bits of `fast::scaled_dot_product_attention` (no mask)
/// of its query alone over its keys and values.
pub fn decode_attention(
    queries: &Array,
    rows: &[(&Array, &Array)],
    scale: f32,
) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    // A kv head's query heads in one product where the BLAS keeps each row's bits alone.
    let (heads, kv_heads) = match (queries.shape(), rows.first()) {
        ([_, heads, ..], Some((k, _))) if k.ndim() == 4 && k.shape()[1] > 0 => {
            (*heads, k.shape()[1])
        }
        _ => (1, 1),
    };
    let group_heads = heads % kv_heads == 0 && skinny_gemm::rows_alone((heads / kv_heads) as usize);
    crate::share_steps();
    let kv: Vec<mlx_sys::mlx_array> = rows
        .iter()
        .flat_map(|(k, v)| [k.as_ptr(), v.as_ptr()])
        .collect();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_decode_attention(
            res,
            queries.as_ptr(),
            kv.as_ptr(),
            rows.len() as i32,
            scale,
            group_heads,
            stream.as_ptr(),
        )
    })
}

/// One sequence's causal attention: `queries` [1, heads, L, d], `keys` [1, kv_heads, T, d] and
/// `values` [1, kv_heads, T, dv] f32, T >= L, query i seeing keys 0..=i + T - L; [1, heads, L, dv]
/// out: the bits of `fast::scaled_dot_product_attention` with the causal mask, or where
/// [`own_causal_attention`], [`attend_causal`]'s order (over only the keys each query sees,
/// shared over the threads).
pub fn causal_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    numerics: Numerics,
) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    let kernel: CausalKernel = match own_causal_attention(numerics) {
        true => Some(causal_kernel),
        false => None,
    };
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_causal_attention(
            res,
            queries.as_ptr(),
            keys.as_ptr(),
            values.as_ptr(),
            scale,
            kernel,
            stream.as_ptr(),
        )
    })
}

/// Whether [`causal_attention`] in `numerics` takes its own kernel: `Int8` on a CPU with a
/// vector set for it (x86-64 with AVX2; elsewhere MLX's attention stays faster).
pub fn own_causal_attention(numerics: Numerics) -> bool {
    numerics == Numerics::Int8 && crate::kernel::attention::Set::vectorized()
}

/// Called by the shim on MLX's stream thread with shapes it has checked (a panic aborts, as
/// any kernel fault would).
///
/// # Safety
/// `q` holds heads * len * d floats, the sides' rows are readable, `out` has room for
/// heads * len * dv.
unsafe extern "C" fn causal_kernel(
    q: *const f32,
    heads: i64,
    len: i64,
    keys: *const HeadRows,
    values: *const HeadRows,
    out: *mut f32,
) {
    let (keys, values) = (side(&*keys), side(&*values));
    let (heads, len) = (heads as usize, len as usize);
    let q = std::slice::from_raw_parts(q, heads * len * keys.width);
    let out = std::slice::from_raw_parts_mut(out, heads * len * values.width);
    attend_causal(q, heads, keys, values, out);
}

/// # Safety
/// The rows `r` describes are readable for as long as the side is used.
unsafe fn side<'a>(r: &HeadRows) -> Side<'a> {
    let (heads, len, width) = (r.heads as usize, r.len as usize, r.width as usize);
    let (head_stride, row_stride) = (r.head_stride as usize, r.row_stride as usize);
    let extent = heads.saturating_sub(1) * head_stride + len.saturating_sub(1) * row_stride + width;
    Side {
        data: std::slice::from_raw_parts(r.data, extent),
        heads,
        len,
        width,
        head_stride,
        row_stride,
    }
}

/// `logsumexp(x, -1, keepdims = true)` of f32 `x` ([..., n]): [..., 1].
pub fn logsumexp(x: &Array) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    // SAFETY: a live mlx-rs array; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe { mlxd_logsumexp(res, x.as_ptr(), stream.as_ptr()) })
}

/// The vectorized exp kernels of one instruction set (`cpp/vmath.h`), for tests.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Vmath {
    pub exp_shifted: unsafe extern "C" fn(*const f32, f32, *mut f32, i64),
    pub silu_mul: unsafe extern "C" fn(*mut f32, *const f32, i64),
    pub max: unsafe extern "C" fn(*const f32, i64, *mut f32) -> bool,
    pub isa: *const std::ffi::c_char,
}

/// Which kernels of [`Vmath`]: MLX's scalar code, or a vector twin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmathIsa {
    Scalar = 0,
    Avx2 = 1,
    Avx512 = 2,
}

/// The kernels of `isa`, when this CPU runs them.
pub fn vmath(isa: VmathIsa) -> Option<Vmath> {
    let mut table = std::mem::MaybeUninit::<Vmath>::uninit();
    // SAFETY: the shim writes a whole table when it returns true, and nothing otherwise.
    unsafe { mlxd_vmath_table(isa as i32, table.as_mut_ptr()).then(|| table.assume_init()) }
}
