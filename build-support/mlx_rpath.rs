// Shared by the build scripts of every crate that links MLX (included with `include!`).

/// Bakes the folder of libmlx.so into this crate's binaries and tests so that they run
/// with no LD_LIBRARY_PATH (a dependency's build script cannot set the rpath), and makes
/// them need the system BLAS directly, so that its fast cblas_sgemm wins over the
/// reference BLAS that the mlx-cpu wheel bundles. On x86-64 Linux they also export
/// skinny-gemm's `cblas_sgemm`, which libmlx then calls first (few-row products).
fn link_mlx_rpath() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    if let Ok(libdir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{libdir}");
    }
    match std::env::var("DEP_MLX_BLAS").as_deref() {
        Ok("") | Ok("none") | Err(_) => {}
        Ok(blas) => println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-l{blas},--as-needed"),
    }
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ARCH") == "x86_64" {
        println!("cargo:rustc-link-arg=-Wl,-u,cblas_sgemm,--export-dynamic-symbol=cblas_sgemm");
    }
}
