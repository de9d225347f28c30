//! `cblas_sgemm`, defined in the executable so that libmlx's calls bind here first (the
//! binaries export it: see `build-support/mlx_rpath.rs`). Few-row products (`x W^T` for
//! layers, `p V` for attention) take the kernel; every other call goes on to the next
//! `cblas_sgemm` in the search order (OpenBLAS).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::kernel::{Gemm, MAX_ROWS};

/// Whether the kernel can and may run here (checked once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let wanted = std::env::var("MLX_DISTRIBUTED_SKINNY_GEMM").map_or(true, |v| v != "0");
        wanted && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    })
}

mod export {
    use super::*;

    const ROW_MAJOR: c_int = 101;
    const NO_TRANS: c_int = 111;
    const TRANS: c_int = 112;

    type Sgemm = unsafe extern "C" fn(
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        f32,
        *const f32,
        c_int,
        *const f32,
        c_int,
        f32,
        *mut f32,
        c_int,
    );

    extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
    }

    /// glibc's `RTLD_NEXT`: look in the objects loaded after this one.
    const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

    /// The `cblas_sgemm` this one stands in front of.
    fn next_sgemm() -> Sgemm {
        static NEXT: OnceLock<usize> = OnceLock::new();
        let f = *NEXT.get_or_init(|| {
            let f = unsafe { dlsym(RTLD_NEXT, c"cblas_sgemm".as_ptr()) };
            assert!(!f.is_null(), "no BLAS provides cblas_sgemm");
            f as usize
        });
        unsafe { std::mem::transmute::<usize, Sgemm>(f) }
    }

    /// # Safety
    /// The CBLAS contract: the pointers cover the matrices the sizes describe.
    #[no_mangle]
    pub unsafe extern "C" fn cblas_sgemm(
        order: c_int,
        trans_a: c_int,
        trans_b: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: f32,
        a: *const f32,
        lda: c_int,
        b: *const f32,
        ldb: c_int,
        beta: f32,
        c: *mut f32,
        ldc: c_int,
    ) {
        let skinny = order == ROW_MAJOR
            && trans_a == NO_TRANS
            && (trans_b == TRANS || trans_b == NO_TRANS)
            && (1..=MAX_ROWS as c_int).contains(&m)
            && n > 0
            && k > 0
            && enabled();
        if !skinny {
            return next_sgemm()(
                order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
            );
        }
        crate::pool::run(&Gemm {
            m: m as usize,
            n: n as usize,
            k: k as usize,
            alpha,
            a,
            lda: lda as usize,
            b,
            ldb: ldb as usize,
            b_trans: trans_b == TRANS,
            beta,
            c,
            ldc: ldc as usize,
        });
    }

    /// Keeps the exported symbol in every binary that links this crate.
    #[used]
    static KEEP: Sgemm = cblas_sgemm;
}
