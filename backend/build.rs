include!("../build-support/mlx_rpath.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    link_mlx_rpath();
    // protoc comes from the system (Debian's protobuf-compiler, Homebrew's protobuf) or PROTOC.
    println!("cargo:rerun-if-changed=../proto/backend.proto");
    build_id()?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["../proto/backend.proto"], &["../proto"])?;
    Ok(())
}

/// The sources every rank must share to compute in step: this crate's and the kernel crates'.
const SOURCES: [&str; 6] = [
    "src",
    "../proto",
    "../quant-cpu/src",
    "../quant-cpu/cpp",
    "../quant-kernels/src",
    "../skinny-gemm/src",
];

/// Sets `MLX_DISTRIBUTED_BUILD_ID` (unless the build sets it) to a digest of `SOURCES`, so two
/// builds of different code refuse each other at the handshake instead of running collectives
/// out of step. The same checkout gives the same id on every platform.
fn build_id() -> std::io::Result<()> {
    println!("cargo:rerun-if-env-changed=MLX_DISTRIBUTED_BUILD_ID");
    if std::env::var_os("MLX_DISTRIBUTED_BUILD_ID").is_some() {
        return Ok(());
    }
    use sha2::{Digest, Sha256};
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut files = Vec::new();
    for dir in SOURCES {
        println!("cargo:rerun-if-changed={dir}");
        collect(&root.join(dir), &mut files)?;
    }
    files.sort();
    let mut hash = Sha256::new();
    for file in files {
        let name = file.strip_prefix(&root).unwrap_or(&file);
        hash.update(name.to_string_lossy().replace('\\', "/").as_bytes());
        hash.update(std::fs::read(&file)?);
    }
    let digest: String = hash
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=MLX_DISTRIBUTED_BUILD_ID=src-{digest}");
    Ok(())
}

/// The source files under `dir` (none when it is missing, as in a packaged crate).
fn collect(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "c" | "cpp" | "h" | "proto" | "toml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}
