//! Few-row matrix products for decode steps, routed here from MLX's `cblas_sgemm` calls.
//!
//! MLX's CPU backend computes every f32 matmul with `cblas_sgemm`. For a decode step the
//! activations have 1 to 16 rows, and OpenBLAS (before 0.3.27) still packs the whole weight
//! matrix into a buffer before multiplying: at one row that copy is most of the step. This
//! crate defines `cblas_sgemm` in the executable, so libmlx's calls bind here; products with a
//! few rows against a row-major weight (`x W^T`, what every linear layer is) run a kernel that
//! streams each weight row once, and everything else goes on to the BLAS it would have reached.
//!
//! Every output element is the same sequence of operations whatever the number of rows or
//! threads, so a row computed in a batch is bit-identical to the same row computed alone.

mod kernel;
mod pool;
mod shim;

pub use kernel::{Gemm, MAX_ROWS};

/// Whether few-row products take this crate's kernel (x86-64 Linux with AVX2 and FMA, and not
/// turned off by `MLX_DISTRIBUTED_SKINNY_GEMM=0`).
pub fn active() -> bool {
    shim::enabled()
}

/// `C = alpha * A B^T + beta * C` for `A` [m, k], `B` [n, k] and `C` [m, n], row-major with
/// leading dimensions; `m` at most [`MAX_ROWS`]. Returns false (computing nothing) where the
/// kernel cannot run on this CPU.
///
/// # Safety
/// The pointers must cover the described matrices, and `C` must not overlap `A` or `B`.
pub unsafe fn gemm_nt(g: &Gemm) -> bool {
    shim::enabled() && {
        pool::run(g);
        true
    }
}
