//! Compiles the MLX primitives (C++) against the MLX and mlx-c headers mlx-sys publishes,
//! and lets the tests find libmlx.so.

include!("../build-support/mlx_rpath.rs");

/// The shim's sources, compiled for any x86-64 or arm64.
const SOURCES: &[&str] = &[
    "quantized_matmul.cpp",
    "host_receive.cpp",
    "fast_ops.cpp",
    "cpu_steps.cpp",
    "decode_layer.cpp",
    "vmath.cpp",
];

/// What they include, and the per-instruction-set kernels (`compile_isa`).
const HEADERS: &[&str] = &[
    "shim.h",
    "cpu_steps.h",
    "vmath.h",
    "vmath_impl.h",
    "vmath_avx2.cpp",
    "vmath_avx512.cpp",
];

fn main() {
    link_mlx_rpath();
    if std::env::var("DEP_MLX_FOREIGN").is_ok() {
        // mlx-sys built nothing native (a check for another target): nothing to compile against.
        return;
    }
    for file in SOURCES.iter().chain(HEADERS) {
        println!("cargo:rerun-if-changed=cpp/{file}");
    }
    println!("cargo:rerun-if-env-changed=DEP_MLX_INCLUDE");
    let Some(include) = std::env::var_os("DEP_MLX_INCLUDE") else {
        panic!("mlx-sys did not publish its include folders (DEP_MLX_INCLUDE)");
    };
    let mut build = cc::Build::new();
    build.cpp(true).std("c++20");
    for file in SOURCES {
        build.file(format!("cpp/{file}"));
    }
    build
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
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        compile_isa("avx2", "cpp/vmath_avx2.cpp", &["-mavx2", "-mfma"]);
        compile_isa(
            "avx512",
            "cpp/vmath_avx512.cpp",
            &["-mavx512f", "-mavx2", "-mfma"],
        );
    }
}

/// One instruction set's kernels (vmath.h), compiled with its flags alone: the rest of the
/// shim must run on any x86-64, and the code picks these at run time.
fn compile_isa(name: &str, file: &str, flags: &[&str]) {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .file(file)
        .flag("-ffp-contract=off");
    // GCC 12 reads its own `_mm512_undefined_ps` as maybe uninitialized (a known false alarm).
    build.flag_if_supported("-Wno-maybe-uninitialized");
    for flag in flags {
        build.flag(flag);
    }
    build.compile(&format!("mlxd_vmath_{name}"));
}
