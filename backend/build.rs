include!("../build-support/mlx_rpath.rs");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    link_mlx_rpath();
    // protoc comes from the system (Debian's protobuf-compiler, Homebrew's protobuf) or PROTOC.
    println!("cargo:rerun-if-changed=../proto/backend.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["../proto/backend.proto"], &["../proto"])?;
    Ok(())
}
