//! `mlx-distributed-backend --addr HOST:PORT`: rank 0's gRPC backend, as LocalAI starts it.

use std::net::SocketAddr;
use std::sync::Arc;

use backend::engine::EngineHandle;
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(&args.addr) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let addr = resolve(addr)?;
    backend::parent_watch::start_from_env();
    let engine = Arc::new(EngineHandle::spawn()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        tracing::info!(%addr, "serving");
        backend::grpc::serve(addr, engine, shutdown_signal()).await
    })?;
    Ok(())
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| format!("--addr {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("--addr {addr}: no address"))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
