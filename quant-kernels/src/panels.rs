//! Many rows (a prefill chunk): the weight is dequantized a band of rows at a time into an f32
//! panel the size of the L2 cache, and the BLAS multiplies it, so compute runs at GEMM speed
//! and the whole dequantized weight never exists.

use std::cell::RefCell;

use super::Operands;

/// Weight rows dequantized per panel.
const BAND: usize = 128;

// The BLAS the binaries link (OpenBLAS on Linux, reached through skinny-gemm's shim).
use skinny_gemm::cblas::{cblas_sgemm, NO_TRANS, ROW_MAJOR, TRANS};

thread_local! {
    /// One panel per thread (MLX's stream thread), kept between calls.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[m, n]` through dequantized panels and `cblas_sgemm`.
pub fn matmul(ops: &Operands, out: &mut [f32]) {
    PANEL.with_borrow_mut(|panel| {
        panel.resize(BAND * ops.k, 0.0);
        for n0 in (0..ops.n).step_by(BAND) {
            let rows = BAND.min(ops.n - n0);
            dequantize_band(ops, n0, rows, panel);
            // SAFETY: x is [m, k], the panel [rows, k], and out [m, n] with n0 + rows <= n.
            unsafe { sgemm_nt(ops.x, ops.m, ops.k, panel, rows, &mut out[n0..], ops.n) };
        }
    });
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` through the BLAS, `out`'s rows `ldc` apart (the f32
/// product the panels feed; public for the kernels benchmark).
///
/// # Safety
/// x holds m * k floats, w n * k, and out (m - 1) * ldc + n; every size fits i32 (the shim
/// took them from MLX shapes).
pub unsafe fn sgemm_nt(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f32],
    n: usize,
    out: &mut [f32],
    ldc: usize,
) {
    debug_assert!(x.len() >= m * k && w.len() >= n * k);
    cblas_sgemm(
        ROW_MAJOR,
        NO_TRANS,
        TRANS,
        m as i32,
        n as i32,
        k as i32,
        1.0,
        x.as_ptr(),
        k as i32,
        w.as_ptr(),
        k as i32,
        0.0,
        out.as_mut_ptr(),
        ldc as i32,
    );
}

/// Weight rows `n0..n0 + rows` into the panel, on this thread: sharing the rows with
/// skinny-gemm's helpers measured 2.5-3.4x slower (`cargo bench -p quant-cpu --bench kernels`),
/// as the helpers still spin when OpenBLAS's own threads start on the panel.
fn dequantize_band(ops: &Operands, n0: usize, rows: usize, panel: &mut [f32]) {
    for (r, dst) in panel.chunks_exact_mut(ops.k).take(rows).enumerate() {
        dequantize_row(ops, n0 + r, dst);
    }
}

/// Weight row `n` as f32 in natural order: `fma(s, q, b)` per code (MLX's dequantized
/// weight), for the BLAS.
fn dequantize_row(ops: &Operands, n: usize, dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::vectorized(ops.format) {
        // SAFETY: `vectorized` checked AVX2 and FMA and the format; dst holds k floats.
        return unsafe { super::x86::dequantize_row(ops, n, dst) };
    }
    #[cfg(target_arch = "aarch64")]
    if super::vectorized(ops.format) {
        // SAFETY: dst holds k floats (NEON is on every aarch64 CPU).
        return unsafe { super::neon::dequantize_row(ops, n, dst) };
    }
    super::scalar::dequantize_row(ops, n, dst);
}
