//! The gRPC layer: LocalAI's `backend.Backend` service. It validates requests and converts
//! them to and from our own types; no protobuf type goes past it.

mod auth;
mod convert;
mod service;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use auth::AuthInterceptor;
pub use service::Service;

use crate::engine::Engine;
use crate::listener::{Conn, Guarded, Limits};
use crate::metrics::Exporter;
use crate::options::Settings;

/// The generated protobuf and tonic code.
pub mod pb {
    tonic::include_proto!("backend");
}

/// LocalAI's limit, both ways.
pub const MAX_MESSAGE_BYTES: usize = 50 * 1024 * 1024;

/// Why serving ended early.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Listen(#[from] crate::listener::ListenError),
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// Streams at once on one connection (LocalAI keeps one channel and runs its requests on it).
const MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// Serves the backend on `addr` until `shutdown` resolves; `settings` hold the defaults
/// LoadModel falls back on, the auth token and the listeners' limits
/// ([`crate::listener::Limits`]).
pub async fn serve<E: Engine>(
    addr: SocketAddr,
    engine: Arc<E>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let limits = Limits::grpc(&settings)?;
    let listener = Guarded::bind(addr, limits, "gRPC").await?;
    let auth = AuthInterceptor::from_env(&settings);
    let exporter = Arc::new(Exporter::new(engine.clone(), Limits::metrics(limits)));
    let service = Service::new(engine, settings, exporter.clone());
    let service = pb::backend_server::BackendServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Pings answered count as the client's bytes, so a quiet channel of a live client is
    // never idle; a peer that does not answer is closed.
    let ping = (limits.idle / 2).min(Duration::from_secs(60));
    let served = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(ping))
        .http2_keepalive_timeout(Some(ping.min(Duration::from_secs(20))))
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            service, auth,
        ))
        .serve_with_incoming_shutdown(incoming(listener), shutdown)
        .await;
    exporter.close().await;
    Ok(served?)
}

/// The listener's connections as the stream tonic serves; accepting stops when tonic drops
/// the stream.
fn incoming(listener: Guarded) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<Conn>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                (conn, _) = listener.accept() => {
                    if sender.send(Ok(conn)).await.is_err() {
                        break;
                    }
                }
                () = sender.closed() => break,
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}
