fn main() {
    println!("mlx-distributed-backend: not yet");
}
