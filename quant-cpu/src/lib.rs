//! Products with MLX quantized weights as stored (affine, and the float modes mxfp4, mxfp8 and
//! nvfp4), on the CPU.
//!
//! MLX's CPU `quantized_matmul` is scalar code, so today's fast CPU mode dequantizes every
//! weight to f32, which costs 5–8× the memory and reads 7× the bytes per token. This crate
//! multiplies f32 activations by the packed weights themselves: an MLX `Primitive` (a small
//! C++ shim, `cpp/quantized_matmul.cpp`) keeps the product inside MLX's lazy graph and calls
//! [`kernel::matmul`], which unpacks weights in registers and accumulates in f32. Kernels are
//! per format and per instruction set, chosen at run time, each tested against
//! [`kernel::reference`].
//!
//! Mixture-of-experts layers take [`gather_quantized_matmul`]: row r of x times expert
//! `indices[r]` of weights stacked [E, N, ...] (mlx-lm's `QuantizedSwitchLinear`), a second
//! primitive in the same shim that hands each run of rows with the same expert to the same
//! kernels, so that rows sorted by expert (prefill) run as multi-row products.
//!
//! A third primitive (`cpp/host_receive.cpp`, [`host_receive`]) is not a product: a node whose
//! value the host supplies when it runs, the CPU stream's thread blocking until then. It lives
//! here because this crate is where our C++ is compiled against MLX's headers.
//!
//! For the same reason, [`fast`] holds MLX's `rms_norm` and `rope` as one node each on the
//! CPU (`cpp/fast_ops.cpp`), where MLX builds them from dozens of plain ops, with the same bits;
//! and [`layer`] a dense decoder layer's whole decode step as one node.

pub mod fast;
mod host;
/// The per-format, per-instruction-set kernels (their own crate, free of MLX, so that they
/// build and run their tests on any target: aarch64 under qemu-user).
pub use quant_kernels as kernel;
pub mod layer;
mod op;

pub use host::{host_receive, HostSource};
pub use kernel::{Format, FormatError, Layout, Mode, Numerics, Operands, Params};
pub use op::{
    gather_quantized_matmul, quantized_matmul, quantized_matmuls, swiglu_quantized_matmul,
    PackedWeight, QuantWeight,
};

use std::ffi::c_void;

/// A C++ unit range (`mlxd_units_fn`): runs units `u0..u1` with its context.
type Units = unsafe extern "C" fn(*mut c_void, i64, i64);

extern "C" {
    fn mlxd_set_share(share: unsafe extern "C" fn(i64, i64, Units, *mut c_void));
}

/// Gives the C++ steps (`cpu_steps.cpp`'s `share_units`: a decode step's attention heads)
/// skinny-gemm's helper threads, once. While the stream thread ran a large model's decode
/// attention alone, the helper idled for about 3% of a step.
pub(crate) fn share_steps() {
    static SET: std::sync::Once = std::sync::Once::new();
    // SAFETY: `share_units` has the C signature the shim declares.
    SET.call_once(|| unsafe { mlxd_set_share(share_units) });
}

/// Runs `unit` over units `0..units`, shared over skinny-gemm's pool (which splits in whole
/// runs of 4 columns: unit u is columns 4u..4u + 4).
///
/// # Safety
/// `unit` with `ctx` may run on any thread, for any disjoint ranges, until this returns (the
/// shim's `run_units` catches its exceptions).
unsafe extern "C" fn share_units(units: i64, work: i64, unit: Units, ctx: *mut c_void) {
    let (units, ctx) = (units.max(0) as usize, ctx as usize);
    skinny_gemm::share(4 * units, work.max(0) as usize, &|n0, n1| {
        // SAFETY: the caller's contract; the pool waits for every chunk before returning.
        unsafe { unit(ctx as *mut c_void, (n0 / 4) as i64, (n1 / 4) as i64) }
    });
}
