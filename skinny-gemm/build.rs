//! This crate's own tests link the system's OpenBLAS on x86-64 Linux (the binaries get theirs
//! with MLX), so that `blas_core` is tested against the library it names.

fn main() {
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ARCH") == "x86_64" {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-lopenblas,--as-needed");
    }
}
