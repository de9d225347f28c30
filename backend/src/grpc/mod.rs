//! The gRPC layer: LocalAI's `backend.Backend` service. It validates requests and converts
//! them to and from our own types; no protobuf type goes past it.

mod auth;
mod convert;
mod service;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;

pub use auth::AuthInterceptor;
pub use service::Service;

use crate::engine::Engine;
use crate::metrics::Exporter;
use crate::options::Settings;

/// The generated protobuf and tonic code.
pub mod pb {
    tonic::include_proto!("backend");
}

/// LocalAI's limit, both ways.
pub const MAX_MESSAGE_BYTES: usize = 50 * 1024 * 1024;

/// Serves the backend on `addr` until `shutdown` resolves; `settings` hold the defaults
/// LoadModel falls back on and the auth token.
pub async fn serve<E: Engine>(
    addr: SocketAddr,
    engine: Arc<E>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let auth = AuthInterceptor::from_env(&settings);
    let exporter = Arc::new(Exporter::new(engine.clone()));
    let service = Service::new(engine, settings, exporter.clone());
    let service = pb::backend_server::BackendServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let served = tonic::transport::Server::builder()
        .add_service(tonic::service::interceptor::InterceptedService::new(
            service, auth,
        ))
        .serve_with_shutdown(addr, shutdown)
        .await;
    exporter.close().await;
    served
}
