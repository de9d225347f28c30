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

#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
pub mod ab;

// The kernel is AVX2/FMA code and the shim a Linux symbol override; elsewhere (macOS:
// Accelerate and Metal) the crate holds only `ab` and MLX's BLAS takes every product.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod blas_core;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod kernel;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod pool;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod shim;

/// The CBLAS `sgemm` the binaries link, as callers in Rust declare it: on x86-64 Linux the
/// shim's (this crate), elsewhere the platform's BLAS.
pub mod cblas {
    pub const ROW_MAJOR: i32 = 101;
    pub const NO_TRANS: i32 = 111;
    pub const TRANS: i32 = 112;

    extern "C" {
        pub fn cblas_sgemm(
            layout: i32,
            trans_a: i32,
            trans_b: i32,
            m: i32,
            n: i32,
            k: i32,
            alpha: f32,
            a: *const f32,
            lda: i32,
            b: *const f32,
            ldb: i32,
            beta: f32,
            c: *mut f32,
            ldc: i32,
        );
    }
}

/// Which kernels the BLAS behind the shim multiplies with, and whether they were raised from
/// AVX2 to AVX-512 ones at load (OpenBLAS on x86-64 Linux; `blas_core`), for the log.
pub fn blas_kernels() -> String {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return blas_core::blas_core().to_string();
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return "BLAS kernels: the library's own".to_string();
}

/// Whether few-row products take this crate's kernel (x86-64 Linux with AVX2 and FMA, and not
/// turned off by `MLX_DISTRIBUTED_SKINNY_GEMM=0`).
pub fn active() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return shim::enabled();
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return false;
}

/// Whether a product of `rows` rows computes each row with the bits it would have alone: the
/// kernel takes it (active, and at most its row limit), and every output is a fixed-order
/// chain of its own row. BLAS libraries give no such promise.
pub fn rows_alone(rows: usize) -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return active() && (1..=kernel::MAX_ROWS).contains(&rows);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return rows == 1;
}

/// The most rows a product may have for each row to keep the bits it has alone ([`rows_alone`]
/// from 1 up to it; 1 where the kernel is not active).
pub fn max_rows_alone() -> usize {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return if active() { kernel::MAX_ROWS } else { 1 };
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    return 1;
}

/// Runs `columns(n0, n1)` over `0..n` in chunks (whole tiles of 4 columns), shared with this
/// crate's helper threads when the product reads `elements` weights or more and they are free;
/// otherwise (and off x86-64 Linux) on the calling thread. Each column is computed once, by
/// one thread, so a product whose columns do not depend on each other keeps its bits.
pub fn share(n: usize, elements: usize, columns: &(dyn Fn(usize, usize) + Sync)) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    return pool::share(n, elements, columns);
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = elements;
        columns(0, n)
    }
}

/// Stops and joins the helper threads (before the process exits); products after it run on
/// the calling thread alone.
pub fn shutdown() {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    pool::shutdown();
}
