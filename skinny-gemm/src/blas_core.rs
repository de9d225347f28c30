//! Which kernels OpenBLAS multiplies with, for the log and the benchmark: a DYNAMIC_ARCH
//! OpenBLAS picks them when it loads, by CPU model, unless `OPENBLAS_CORETYPE` names them. The
//! f32 panels of a prefill (and the exact path's attention) run on them, so their speed
//! follows: on a 2-core AMD EPYC with AVX-512, `OPENBLAS_CORETYPE=Haswell` (AVX2, which these
//! machines' environment sets) prefilled 557 tokens of SmolLM2 4-bit in `--exact` at 486-493
//! tok/s, and OpenBLAS's own choice there (Cooperlake, AVX-512) at 600-642.

use std::ffi::{c_char, c_void, CStr};

/// The BLAS kernels in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlasCore {
    /// OpenBLAS's kernels, and whether `OPENBLAS_CORETYPE` chose them.
    OpenBlas { core: String, forced: bool },
    /// Another BLAS, or an OpenBLAS built for one CPU.
    Fixed,
}

impl std::fmt::Display for BlasCore {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            BlasCore::OpenBlas { core, forced: true } => {
                write!(f, "OpenBLAS kernels: {core} (OPENBLAS_CORETYPE)")
            }
            BlasCore::OpenBlas { core, .. } => write!(f, "OpenBLAS kernels: {core}"),
            BlasCore::Fixed => write!(f, "BLAS kernels: the library's own"),
        }
    }
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// glibc's `RTLD_DEFAULT`: every object of the process.
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The kernels of the OpenBLAS loaded in this process, through its `openblas_get_corename`.
pub fn blas_core() -> BlasCore {
    // SAFETY: a lookup by name in the loaded objects.
    let f = unsafe { dlsym(RTLD_DEFAULT, c"openblas_get_corename".as_ptr()) };
    if f.is_null() {
        return BlasCore::Fixed;
    }
    // SAFETY: OpenBLAS's exported `char *openblas_get_corename(void)`, which returns a static,
    // NUL-terminated name.
    let name = unsafe {
        let corename =
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *const c_char>(f);
        corename()
    };
    if name.is_null() {
        return BlasCore::Fixed;
    }
    // SAFETY: as above.
    let core = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let forced = std::env::var_os("OPENBLAS_CORETYPE").is_some();
    BlasCore::OpenBlas { core, forced }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernels_openblas_runs_and_who_chose_them() {
        let found = blas_core();
        println!("{found}");
        let BlasCore::OpenBlas { core, forced } = found else {
            panic!("the tests link OpenBLAS, and it names its kernels");
        };
        let named = std::env::var("OPENBLAS_CORETYPE");
        assert_eq!(forced, named.is_ok());
        if let Ok(named) = named {
            assert!(core.eq_ignore_ascii_case(&named), "{core} for {named}");
        }
    }
}
