//! Serving rank 0's gRPC backend until SIGTERM, Ctrl-C or the parent's exit: shared by
//! `mlx-distributed-backend` and `worker mlx-distributed --rank 0`. Shutting down is
//! orderly and bounded: running requests fail with UNAVAILABLE, the connections close,
//! the engine thread drops the model and waits for MLX, and every thread is joined.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::engine::EngineHandle;
use crate::lifecycle;
use crate::options::{LoadConfig, LoadRequest, Settings};

/// How long open connections may take to close once the requests have ended.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// How long the engine thread may take to end (it waits for MLX itself).
const ENGINE_LIMIT: Duration = Duration::from_secs(3);

/// How rank 0 serves.
pub struct ServerOptions {
    /// Where to serve gRPC (`host:port`).
    pub addr: String,
    /// The command line's settings over the environment (LoadModel's defaults, tokens).
    pub settings: Settings,
    /// A model to load before serving (`worker serve --config`: what a host's LoadModel
    /// would ask); serving starts once it is loaded, and its failure ends the process.
    pub preload: Option<LoadRequest>,
}

/// Serves with a fresh engine; blocks until shut down.
pub fn run(opts: ServerOptions) -> Result<(), Box<dyn std::error::Error>> {
    let addr = resolve(&opts.addr)?;
    crate::listener::raise_fd_limit();
    lifecycle::watch_signals()?;
    let parent = crate::parent_watch::start_from_env();
    let engine = Arc::new(EngineHandle::spawn()?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let served = runtime.block_on(async {
        if let Some(req) = &opts.preload {
            preload(&engine, req, &opts.settings).await?;
        }
        serve(addr, engine.clone(), opts.settings)
            .await
            .map_err(|e| serve_error(addr, &e))?;
        Ok::<(), Box<dyn std::error::Error>>(())
    });
    // However serving ended (a stop, or the port was taken), everything else stops too.
    lifecycle::request_stop();
    if let Err(e) = engine.join(ENGINE_LIMIT) {
        // It may be inside MLX: `exit`'s destructors would race it.
        tracing::error!("{e}; exiting without cleanup");
        lifecycle::exit_now(lifecycle::EXIT_STUCK);
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    let orphaned = parent.is_some_and(|p| p.join());
    served?;
    if orphaned {
        return Err("the parent process exited without stopping this backend".into());
    }
    Ok(())
}

/// Loads `req` as LoadModel would, before anything is served.
async fn preload(
    engine: &EngineHandle,
    req: &LoadRequest,
    settings: &Settings,
) -> Result<(), Box<dyn std::error::Error>> {
    let config = LoadConfig::from_request(req, settings)?;
    tracing::info!(model = %req.model, "loading before serving");
    engine
        .load(config)
        .await
        .map_err(|_| "the engine stopped while loading")?
        .map_err(|e| format!("loading {}: {e}", req.model))?;
    Ok(())
}

/// Serves until a stop is requested; then ends the running requests so that the
/// connections can close, and gives them `DRAIN_LIMIT` to do so.
async fn serve(
    addr: SocketAddr,
    engine: Arc<EngineHandle>,
    settings: Settings,
) -> Result<(), crate::grpc::ServeError> {
    tracing::info!(%addr, "serving");
    let stopping = engine.clone();
    let on_stop = async move {
        lifecycle::stopped().await;
        tracing::info!("shutting down");
        stopping.stop();
    };
    let drained = async {
        lifecycle::stopped().await;
        tokio::time::sleep(DRAIN_LIMIT).await;
    };
    tokio::select! {
        served = crate::grpc::serve(addr, engine, settings, on_stop) => served,
        () = drained => {
            tracing::warn!("connections still open {DRAIN_LIMIT:?} after the stop; closing them");
            Ok(())
        }
    }
}

/// tonic's error says only "transport error"; its sources say why (the port is taken, the
/// address is not this machine's).
fn serve_error(addr: SocketAddr, e: &crate::grpc::ServeError) -> String {
    let mut message = format!("serving gRPC on {addr}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message += &format!(": {s}");
        source = s.source();
    }
    message
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| format!("--addr {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("--addr {addr}: no address"))
}
