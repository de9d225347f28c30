//! Serving rank 0's gRPC backend until SIGTERM or Ctrl-C: shared by
//! `mlx-distributed-backend` and `worker mlx-distributed --rank 0`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::engine::EngineHandle;

/// Serves at `addr` (`host:port`) with a fresh engine; blocks until shut down.
pub fn run(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let addr = resolve(addr)?;
    crate::parent_watch::start_from_env();
    let engine = Arc::new(EngineHandle::spawn()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        tracing::info!(%addr, "serving");
        crate::grpc::serve(addr, engine, shutdown_signal()).await
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
