//! The MLX ops: nodes of the lazy graph whose CPU evaluation runs [`crate::kernel::matmul`]
//! (once per product, or once per run of rows with the same expert for the gathered one).

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream};

use crate::kernel::{self, Format, Layout, Mode, Numerics, Operands, Params};

extern "C" {
    /// `cpp/quantized_matmul.cpp`: builds the node, checking every operand's dtype and shape.
    fn mlxd_quantized_matmul(
        res: *mut mlx_sys::mlx_array,
        x: mlx_sys::mlx_array,
        w: mlx_sys::mlx_array,
        scales: mlx_sys::mlx_array,
        biases: mlx_sys::mlx_array,
        group: i32,
        bits: i32,
        mode: i32,
        kernel: Kernel,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    /// `cpp/quantized_matmul.cpp`: builds the gathered node, checking every operand's dtype
    /// and shape (the values of `indices` are checked when it runs).
    fn mlxd_gather_quantized_matmul(
        res: *mut mlx_sys::mlx_array,
        x: mlx_sys::mlx_array,
        w: mlx_sys::mlx_array,
        scales: mlx_sys::mlx_array,
        biases: mlx_sys::mlx_array,
        indices: mlx_sys::mlx_array,
        group: i32,
        bits: i32,
        mode: i32,
        kernel: Kernel,
        stream: mlx_sys::mlx_stream,
    ) -> i32;

    /// `cpp/quantized_matmul.cpp`: builds the node of several products sharing x (3 arrays
    /// per weight in `weights`), checking every operand.
    fn mlxd_quantized_matmuls(
        res: *mut mlx_sys::mlx_vector_array,
        x: mlx_sys::mlx_array,
        weights: *const mlx_sys::mlx_array,
        count: i32,
        group: i32,
        bits: i32,
        mode: i32,
        kernel: Kernel,
        swiglu: bool,
        stream: mlx_sys::mlx_stream,
    ) -> i32;
}

/// The kernel's C signature, as the shim calls it.
pub(crate) type Kernel = unsafe extern "C" fn(
    *const f32,
    i64,
    i64,
    *const u8,
    *const std::ffi::c_void,
    *const std::ffi::c_void,
    i32,
    i64,
    i32,
    i32,
    i32,
    *mut f32,
);

/// One part of a product of several sharing x (`MlxdPart` in `cpp/shim.h`): a packed weight of
/// `n` rows and where its output goes.
#[repr(C)]
pub(crate) struct Part {
    w: *const u8,
    scales: *const std::ffi::c_void,
    biases: *const std::ffi::c_void,
    n: i64,
    out: *mut f32,
}

/// The parts kernel's C signature (`mlxd_qmm_parts_kernel`): x, m, k, the parts and their
/// count, then the params dtype, bits, group and mode they share.
pub(crate) type PartsKernel =
    unsafe extern "C" fn(*const f32, i64, i64, *const Part, i32, i32, i32, i32, i32);

/// The shim's number of a mode (`MlxdMode` in `cpp/shim.h`).
pub(crate) fn mode_code(mode: Mode) -> i32 {
    match mode {
        Mode::Affine => 0,
        Mode::Mxfp4 => 1,
        Mode::Mxfp8 => 2,
        Mode::Nvfp4 => 3,
    }
}

/// The mode the shim numbers `code`.
fn mode_of(code: i32) -> Option<Mode> {
    Mode::ALL.into_iter().find(|m| mode_code(*m) == code)
}

/// `biases`' handle, or an empty one (a float mode's weight has none).
fn handle(biases: Option<&Array>) -> mlx_sys::mlx_array {
    match biases {
        Some(b) => b.as_ptr(),
        None => mlx_sys::mlx_array {
            ctx: std::ptr::null_mut(),
        },
    }
}

/// `x @ dequantize(w, scales, biases).T` for x [..., K] f32, w [N, K*bits/32] uint32 as MLX
/// packs it, scales and biases [N, K/group] of one dtype (f32, bf16 or f16, as stored: the
/// kernels widen them exactly); f32 out, lazy, like every MLX op. In a float mode
/// (`format.mode`: mxfp4, mxfp8, nvfp4) scales are uint8 and `biases` is `None`; an affine
/// weight passes `&biases` (or `Some`).
pub fn quantized_matmul<'a>(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: impl Into<Option<&'a Array>>,
    format: Format,
) -> Result<Array, Exception> {
    let biases = biases.into();
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_quantized_matmul(
            res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            handle(biases),
            format.group as i32,
            format.bits as i32,
            mode_code(format.mode),
            kernel_for(format),
            stream.as_ptr(),
        )
    })
}

/// The product of a mixture-of-experts layer: row r of x [R, K] f32 times expert `indices[r]`
/// of w [E, N, K*bits/32] uint32 (experts stacked as mlx-lm's `QuantizedSwitchLinear` stores
/// them), scales and biases [E, N, K/group] of one dtype (f32, bf16 or f16; a float mode's
/// uint8 scales and no biases, as in [`quantized_matmul`]); indices `[R]`
/// uint32 or int32; [R, N] f32 out, lazy. That is MLX's `gather_qmm(x[:, None], w, scales, biases,
/// rhs_indices=indices, transpose=True)` squeezed.
///
/// Each run of consecutive rows with the same expert is one product on that expert's weights,
/// so sort the rows by expert (long prompts) to reach the many-row kernels. A row gets the bits
/// [`quantized_matmul`] gives its run on the expert alone: in runs of up to
/// [`kernel::PANEL_ROWS`] rows, the bits of the row alone; longer runs go through the panels
/// and the BLAS, within rounding of it. The indices are graph values, read when the node runs:
/// a row whose index is outside `0..E` (negative int32 included) comes out zero and reads
/// nothing: that is how expert parallelism passes the pairs whose expert another rank holds.
pub fn gather_quantized_matmul<'a>(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: impl Into<Option<&'a Array>>,
    indices: &Array,
    format: Format,
) -> Result<Array, Exception> {
    let biases = biases.into();
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_gather_quantized_matmul(
            res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            handle(biases),
            indices.as_ptr(),
            format.group as i32,
            format.bits as i32,
            mode_code(format.mode),
            kernel_for(format),
            stream.as_ptr(),
        )
    })
}

/// One affine packed weight of a [`quantized_matmuls`] or [`swiglu_quantized_matmul`]: codes
/// `[N, K*bits/32]` uint32, scales and biases `[N, K/group]` of one dtype. ([`QuantWeight`]
/// takes any mode.)
#[derive(Clone, Copy)]
pub struct PackedWeight<'a> {
    pub w: &'a Array,
    pub scales: &'a Array,
    pub biases: &'a Array,
}

/// One packed weight of any mode: codes `[N, K*bits/32]` uint32, scales `[N, K/group]`, and
/// biases of the scales' dtype (affine) or none (mxfp4, mxfp8, nvfp4: uint8 scales).
#[derive(Clone, Copy)]
pub struct QuantWeight<'a> {
    pub w: &'a Array,
    pub scales: &'a Array,
    pub biases: Option<&'a Array>,
}

impl<'a> From<PackedWeight<'a>> for QuantWeight<'a> {
    fn from(p: PackedWeight<'a>) -> QuantWeight<'a> {
        QuantWeight {
            w: p.w,
            scales: p.scales,
            biases: Some(p.biases),
        }
    }
}

/// `x @ dequantize(w).T` for each weight (all of `format`; [`PackedWeight`]s or
/// [`QuantWeight`]s), as one node: each output has the bits of its own [`quantized_matmul`].
/// A layer's q/k/v in one node instead of three.
pub fn quantized_matmuls<'a, W: Into<QuantWeight<'a>> + Copy>(
    x: &Array,
    weights: &[W],
    format: Format,
) -> Result<Vec<Array>, Exception> {
    let weights: Vec<QuantWeight> = weights.iter().map(|w| (*w).into()).collect();
    products(x, &weights, format, false)
}

/// `silu(x @ gate.T) * (x @ up.T)` (mlx-lm's MLP before its down projection) as one node,
/// with the bits of `silu` and `multiply` over two [`quantized_matmul`]s on MLX's CPU.
pub fn swiglu_quantized_matmul<'a>(
    x: &Array,
    gate: impl Into<QuantWeight<'a>>,
    up: impl Into<QuantWeight<'a>>,
    format: Format,
) -> Result<Array, Exception> {
    let mut out = products(x, &[gate.into(), up.into()], format, true)?;
    out.pop()
        .ok_or_else(|| Exception::custom("the SwiGLU node gave no output"))
}

fn products(
    x: &Array,
    weights: &[QuantWeight],
    format: Format,
    swiglu: bool,
) -> Result<Vec<Array>, Exception> {
    let stream = Stream::thread_local_or_default();
    let handles: Vec<mlx_sys::mlx_array> = weights
        .iter()
        .flat_map(|p| [p.w.as_ptr(), p.scales.as_ptr(), handle(p.biases)])
        .collect();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_vector_array_op(|res| unsafe {
        mlxd_quantized_matmuls(
            res,
            x.as_ptr(),
            handles.as_ptr(),
            weights.len() as i32,
            format.group as i32,
            format.bits as i32,
            mode_code(format.mode),
            kernel_for(format),
            swiglu,
            stream.as_ptr(),
        )
    })
}

/// The kernel the shim calls for products of `format`: the shim passes the mode, bits and
/// group, and the function itself says the numerics and the layout ([`way`]).
pub(crate) fn kernel_for(format: Format) -> Kernel {
    match way(format) {
        EXACT => qmm_kernel::<EXACT>,
        INT8 => qmm_kernel::<INT8>,
        _ => qmm_kernel::<INT8_TILES>,
    }
}

/// The numerics and weight layout of a kernel, as its const parameter: exact (rows), int8 on
/// rows, int8 on tiles ([`kernel::int8::tiles`]; only int8 reads them).
const EXACT: u8 = 0;
const INT8: u8 = 1;
const INT8_TILES: u8 = 2;

fn way(format: Format) -> u8 {
    match (format.numerics, format.layout) {
        (_, Layout::Tiles) => INT8_TILES,
        (Numerics::Int8, Layout::Rows) => INT8,
        (Numerics::Exact, Layout::Rows) => EXACT,
    }
}

/// The numerics and layout a kernel's [`way`] stands for.
fn of_way(way: u8) -> (Numerics, Layout) {
    match way {
        EXACT => (Numerics::Exact, Layout::Rows),
        INT8 => (Numerics::Int8, Layout::Rows),
        _ => (Numerics::Int8, Layout::Tiles),
    }
}

/// Called by the shim on MLX's stream thread with operands it has checked: the exact numerics,
/// or int8 activations where the format has an integer kernel, on weights in rows or tiles
/// (`WAY`). A panic must not unwind into C++, so it aborts (`extern "C"`), as any kernel fault
/// would.
///
/// # Safety
/// As [`run_kernel`].
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn qmm_kernel<const WAY: u8>(
    x: *const f32,
    m: i64,
    k: i64,
    w: *const u8,
    scales: *const std::ffi::c_void,
    biases: *const std::ffi::c_void,
    params: i32,
    n: i64,
    bits: i32,
    group: i32,
    mode: i32,
    out: *mut f32,
) {
    let format = (bits, group, mode, of_way(WAY));
    run_kernel(x, (m, k, n), (w, scales, biases, params), format, out)
}

/// The product the shim asked for.
///
/// # Safety
/// As [`operands`], and `out` has room for m*n floats.
unsafe fn run_kernel(
    x: *const f32,
    (m, k, n): (i64, i64, i64),
    weights: (
        *const u8,
        *const std::ffi::c_void,
        *const std::ffi::c_void,
        i32,
    ),
    format: (i32, i32, i32, (Numerics, Layout)),
    out: *mut f32,
) {
    let Some(ops) = operands(x, (m, k, n), weights, format) else {
        return; // the shim refused it when the node was built
    };
    kernel::matmul(&ops, std::slice::from_raw_parts_mut(out, ops.m * ops.n));
}

/// The parts kernel of `format`'s numerics and layout (the decode layer's q/k/v and gate/up).
pub(crate) fn parts_kernel_for(format: Format) -> PartsKernel {
    match way(format) {
        EXACT => qmm_parts_kernel::<EXACT>,
        INT8 => qmm_parts_kernel::<INT8>,
        _ => qmm_parts_kernel::<INT8_TILES>,
    }
}

/// Called by the shim as [`qmm_kernel`], for `count` parts sharing x
/// ([`kernel::matmul_many`]).
///
/// # Safety
/// `parts` holds `count` parts, each as [`operands`] asks, with room for m*n floats at `out`.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn qmm_parts_kernel<const WAY: u8>(
    x: *const f32,
    m: i64,
    k: i64,
    parts: *const Part,
    count: i32,
    params: i32,
    bits: i32,
    group: i32,
    mode: i32,
) {
    let numerics = of_way(WAY);
    let parts = std::slice::from_raw_parts(parts, count.max(0) as usize);
    let mut ops = Vec::with_capacity(parts.len());
    let mut outs = Vec::with_capacity(parts.len());
    for p in parts {
        let weights = (p.w, p.scales, p.biases, params);
        let Some(o) = operands(x, (m, k, p.n), weights, (bits, group, mode, numerics)) else {
            return; // the shim refused it when the node was built
        };
        outs.push(std::slice::from_raw_parts_mut(p.out, o.m * o.n));
        ops.push(o);
    }
    kernel::matmul_many(&ops, &mut outs);
}

/// The operands of a product the shim passes, or None for a format it would have refused.
///
/// # Safety
/// `x` holds m*k floats, `w` n rows of k*bits/8 bytes, `scales` and `biases` n*k/group
/// values of the dtype `params` names (`biases` null in a float mode), alive while the kernel
/// runs.
unsafe fn operands<'a>(
    x: *const f32,
    (m, k, n): (i64, i64, i64),
    (w, scales, biases, params): (
        *const u8,
        *const std::ffi::c_void,
        *const std::ffi::c_void,
        i32,
    ),
    (bits, group, mode, (numerics, layout)): (i32, i32, i32, (Numerics, Layout)),
) -> Option<Operands<'a>> {
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let format = mode_of(mode).map(|mode| Format::with_mode(mode, bits as u32, group as usize));
    let Some(Ok(format)) = format else {
        return None;
    };
    let format = format.with_numerics(numerics).with_layout(layout);
    let groups = n * (k / format.group);
    Some(Operands {
        x: std::slice::from_raw_parts(x, m * k),
        m,
        k,
        w: std::slice::from_raw_parts(w, n * format.row_bytes(k)),
        scales: params_of(scales, groups, params, format.mode),
        biases: (!biases.is_null()).then(|| params_of(biases, groups, params, format.mode)),
        n,
        format,
    })
}

/// `len` scales or biases at `at`, of the dtype the shim's code `params` names (bytes: the
/// float mode's scale format).
///
/// # Safety
/// `at` holds `len` values of that dtype, alive while the kernel runs.
unsafe fn params_of<'a>(
    at: *const std::ffi::c_void,
    len: usize,
    params: i32,
    mode: Mode,
) -> Params<'a> {
    let bytes = || std::slice::from_raw_parts(at as *const u8, len);
    match (params, mode) {
        (1, _) => Params::Bf16(std::slice::from_raw_parts(at as *const u16, len)),
        (2, _) => Params::F16(std::slice::from_raw_parts(at as *const u16, len)),
        (3, Mode::Nvfp4) => Params::E4m3(bytes()),
        (3, _) => Params::E8m0(bytes()),
        _ => Params::F32(std::slice::from_raw_parts(at as *const f32, len)),
    }
}
