fn main() {
    println!("worker: not yet");
}
