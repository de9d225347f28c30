//! `mlx-distributed-backend --addr HOST:PORT`: rank 0's gRPC backend, as LocalAI starts it.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "mlx-distributed-backend",
    version,
    about = "LocalAI gRPC backend running MLX models across machines"
)]
struct Args {
    /// Where to serve gRPC (LocalAI passes a free loopback port).
    #[arg(long, default_value = "localhost:50051")]
    addr: String,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    backend::progress::init_log("info");
    let opts = backend::server::ServerOptions {
        addr: args.addr,
        settings: backend::options::Settings::default(),
        preload: None,
    };
    let code = match backend::server::run(opts) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    };
    // MLX must be idle before `exit` runs its destructors.
    backend::lifecycle::end_process(code)
}
