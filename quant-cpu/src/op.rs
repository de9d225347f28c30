//! The MLX op: a node of the lazy graph whose CPU evaluation runs [`crate::kernel::matmul`].

use mlx_rs::error::Exception;
use mlx_rs::{Array, Stream};

use crate::kernel::{self, Format, Operands};

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
        kernel: Kernel,
        stream: mlx_sys::mlx_stream,
    ) -> i32;
}

/// The kernel's C signature, as the shim calls it.
type Kernel = unsafe extern "C" fn(
    *const f32,
    i64,
    i64,
    *const u8,
    *const f32,
    *const f32,
    i64,
    i32,
    i32,
    *mut f32,
);

/// `x @ dequantize(w, scales, biases).T` for x [..., K] f32, w [N, K*bits/32] uint32 as MLX
/// packs it, scales and biases [N, K/group] f32; lazy, like every MLX op.
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    format: Format,
) -> Result<Array, Exception> {
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is a live mlx-rs object; mlx-c copies what it keeps.
    mlx_rs::raw::try_array_op(|res| unsafe {
        mlxd_quantized_matmul(
            res,
            x.as_ptr(),
            w.as_ptr(),
            scales.as_ptr(),
            biases.as_ptr(),
            format.group as i32,
            format.bits as i32,
            qmm_kernel,
            stream.as_ptr(),
        )
    })
}

/// Called by the shim on MLX's stream thread with operands it has checked.
/// A panic must not unwind into C++, so it aborts (`extern "C"`), as any kernel fault would.
///
/// # Safety
/// `x` holds m*k floats, `w` n rows of k*bits/8 bytes, `scales` and `biases` n*k/group
/// floats, `out` room for m*n floats, and (bits, group) is a supported format.
unsafe extern "C" fn qmm_kernel(
    x: *const f32,
    m: i64,
    k: i64,
    w: *const u8,
    scales: *const f32,
    biases: *const f32,
    n: i64,
    bits: i32,
    group: i32,
    out: *mut f32,
) {
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let Ok(format) = Format::new(bits as u32, group as usize) else {
        return; // the shim refused it when the node was built
    };
    let groups = n * (k / format.group);
    let ops = Operands {
        x: std::slice::from_raw_parts(x, m * k),
        m,
        k,
        w: std::slice::from_raw_parts(w, n * format.row_bytes(k)),
        scales: std::slice::from_raw_parts(scales, groups),
        biases: std::slice::from_raw_parts(biases, groups),
        n,
        format,
    };
    kernel::matmul(&ops, std::slice::from_raw_parts_mut(out, m * n));
}
