//! `bench`: this engine, mlx-lm and llama.cpp on the same checkpoint, in one run, and decode
//! measured against the machine's read bandwidth. A development tool: `cargo run --release -p
//! bench -- --model DIR ...`; the shipped `worker` binary does not carry it.

mod args;
mod bandwidth;
mod engine;

use clap::Parser;

pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn main() -> std::process::ExitCode {
    let args = args::BenchArgs::parse();
    backend::progress::init_log("warn");
    if let args::Heap::Bounded = args.heap {
        backend::memory::bound_heap();
    }
    let code = match engine::run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    // MLX must be idle before `exit` runs its destructors.
    backend::lifecycle::end_process(code)
}
