//! Compiles the MLX primitives (C++) against the MLX and mlx-c headers mlx-sys publishes,
//! and lets the tests find libmlx.so.

include!("../build-support/mlx_rpath.rs");

fn main() {
    link_mlx_rpath();
    if std::env::var("DEP_MLX_FOREIGN").is_ok() {
        // mlx-sys built nothing native (a check for another target): nothing to compile against.
        return;
    }
    println!("cargo:rerun-if-changed=cpp/quantized_matmul.cpp");
    println!("cargo:rerun-if-changed=cpp/host_receive.cpp");
    println!("cargo:rerun-if-changed=cpp/fast_ops.cpp");
    println!("cargo:rerun-if-changed=cpp/shim.h");
    println!("cargo:rerun-if-env-changed=DEP_MLX_INCLUDE");
    let Some(include) = std::env::var_os("DEP_MLX_INCLUDE") else {
        panic!("mlx-sys did not publish its include folders (DEP_MLX_INCLUDE)");
    };
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .file("cpp/quantized_matmul.cpp")
        .file("cpp/host_receive.cpp")
        .file("cpp/fast_ops.cpp")
        // Products and sums rounded one by one, as MLX's fallbacks that fast_ops.cpp matches.
        .flag("-ffp-contract=off")
        // MLX's SIMD headers pun pointers (as MLX itself is built: correct without the rule).
        .flag("-fno-strict-aliasing")
        .flag_if_supported("-Wno-strict-aliasing")
        .flag_if_supported("-Wno-sign-compare")
        .flag_if_supported("-Wno-unused-parameter")
        // mlx-c's headers define a static they do not use.
        .flag_if_supported("-Wno-unused-variable");
    for dir in std::env::split_paths(&include) {
        build.include(dir);
    }
    if let Ok(defines) = std::env::var("DEP_MLX_DEFINES") {
        for define in defines.split(',').filter(|d| !d.is_empty()) {
            build.define(define, None);
        }
    }
    build.compile("mlxd_quant_shim");
}
