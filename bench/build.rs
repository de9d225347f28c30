include!("../build-support/mlx_rpath.rs");

fn main() {
    link_mlx_rpath();
}
