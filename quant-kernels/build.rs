//! The panels (prefill) call `cblas_sgemm`. The binaries that use this crate get a BLAS with
//! MLX; this crate's own tests get the system's OpenBLAS on x86-64 Linux, where skinny-gemm's
//! `cblas_sgemm` stands in front of it and looks it up at run time, so it must be linked even
//! though no symbol binds to it at link time. Elsewhere (aarch64 under qemu-user, macOS) the
//! tests define a plain `cblas_sgemm` of their own (`tests.rs`).

fn main() {
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ARCH") == "x86_64" {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-lopenblas,--as-needed");
    }
}
