//! What the integration tests of MLX nodes share.
// Each test crate takes what it needs of these.
#![allow(dead_code)]

use std::ffi::CString;

use mlx_rs::transforms::eval;
use mlx_rs::{Array, Stream};
use quant_cpu::Format;

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The bits of an array's values as f32, row-major.
pub fn bits(a: &Array) -> TestResult<Vec<u32>> {
    let a = a.as_type::<f32>()?;
    eval([&a])?;
    Ok(a.try_as_slice::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect())
}

pub fn optional_int(value: i32) -> mlx_sys::mlx_optional_int {
    mlx_sys::mlx_optional_int {
        value,
        has_value: true,
    }
}

pub fn empty() -> mlx_sys::mlx_array {
    mlx_sys::mlx_array {
        ctx: std::ptr::null_mut(),
    }
}

/// MLX's `quantize(w, group, bits, mode)`: (codes, scales).
pub fn quantize_mode(w: &Array, f: Format) -> TestResult<(Array, Array)> {
    let mode = CString::new(f.mode.name())?;
    let stream = Stream::thread_local_or_default();
    // SAFETY: live handles; mlx-c copies what it keeps.
    let mut out = mlx_rs::raw::try_vector_array_op(|res| unsafe {
        mlx_sys::mlx_quantize(
            res,
            w.as_ptr(),
            optional_int(f.group as i32),
            optional_int(f.bits as i32),
            mode.as_ptr(),
            empty(),
            stream.as_ptr(),
        )
    })?
    .into_iter();
    match (out.next(), out.next(), out.next()) {
        (Some(w), Some(s), None) => Ok((w, s)),
        _ => Err("quantize gave other than (codes, scales)".into()),
    }
}
