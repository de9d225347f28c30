//! Rank 0's live metrics: `/metrics` in Prometheus' text format and a status page `/`, on the
//! address of the LoadModel option `metrics_addr`. Everything shown comes from the engine's
//! `Snapshot` (the same one Status and GetMetrics answer from), the requests' outcomes the
//! gRPC layer counts here, and a few minutes of samples for the rates and the page's chart.

mod exposition;
mod history;
mod http;
mod outcomes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, Mutex};
use tokio::task::JoinHandle;

use crate::engine::Engine;
use crate::listener::{Guarded, Limits};
pub use history::{History, Sample};
pub use outcomes::{Outcomes, RecentError, Tally};

/// How long a closing listener may take to finish its open connections.
const CLOSE_LIMIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics_addr {addr}: cannot listen: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What the listener serves, and the listener itself (one at a time).
pub struct Exporter {
    state: Arc<Sources>,
    listener: Mutex<Option<Listener>>,
    limits: Limits,
}

/// What the handlers read.
pub(crate) struct Sources {
    pub engine: Arc<dyn Engine>,
    pub outcomes: Arc<Outcomes>,
    pub history: Arc<History>,
    /// The pages as the sampler last rendered them: requests share these bytes, so any
    /// number of them costs no more memory than one.
    pub rendered: std::sync::RwLock<http::Rendered>,
}

/// A listener serving on its address until it is closed.
struct Listener {
    /// The address LoadModel asked for (a later LoadModel naming it keeps this listener).
    requested: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Exporter {
    /// `limits`: the listener's connection bounds ([`Limits::metrics`]).
    pub fn new(engine: Arc<dyn Engine>, limits: Limits) -> Exporter {
        Exporter {
            state: Arc::new(Sources {
                engine,
                outcomes: Arc::new(Outcomes::default()),
                history: Arc::new(History::default()),
                rendered: std::sync::RwLock::new(http::Rendered::default()),
            }),
            listener: Mutex::new(None),
            limits,
        }
    }

    /// Where the gRPC layer counts each request's outcome.
    pub fn outcomes(&self) -> &Arc<Outcomes> {
        &self.state.outcomes
    }

    /// Runs a LoadModel (`load`, which says whether it succeeded) with the listener it asks
    /// for: a new address is bound first, so a taken one fails before any loading; a
    /// successful load then keeps the listener on the same address, replaces one on another,
    /// or closes it when `addr` is None; a failed load leaves the old listener as it was.
    /// LoadModels take their turn here, so no address is ever bound twice.
    pub async fn around_load<T>(
        &self,
        addr: Option<SocketAddr>,
        load: impl Future<Output = (T, bool)>,
    ) -> Result<T, MetricsError> {
        let mut current = self.listener.lock().await;
        let keep = current.as_ref().map(|l| l.requested) == addr;
        let fresh = match (addr, keep) {
            (Some(addr), false) => Some(self.listen(addr).await?),
            _ => None,
        };
        let (out, loaded) = load.await;
        match (loaded, keep) {
            (false, _) => close_opt(fresh).await,
            (true, true) => {}
            (true, false) => close_opt(std::mem::replace(&mut *current, fresh)).await,
        }
        Ok(out)
    }

    /// Binds `addr` and serves on it.
    async fn listen(&self, addr: SocketAddr) -> Result<Listener, MetricsError> {
        let socket = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let bound = socket.local_addr().unwrap_or(addr);
        tracing::info!(%bound, "serving metrics and the status page");
        let socket = Guarded::new(socket, self.limits, "metrics");
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(http::serve(socket, self.state.clone(), stopped));
        Ok(Listener {
            requested: addr,
            stop: Some(stop),
            task,
        })
    }

    /// Closes the listener, if any (the process is stopping).
    pub async fn close(&self) {
        close_opt(self.listener.lock().await.take()).await;
    }
}

/// Stops accepting at once (the address is free when this returns), lets open connections
/// finish for up to `CLOSE_LIMIT`, then drops them.
async fn close_opt(listener: Option<Listener>) {
    let Some(mut l) = listener else { return };
    if let Some(stop) = l.stop.take() {
        let _ = stop.send(());
    }
    if tokio::time::timeout(CLOSE_LIMIT, &mut l.task)
        .await
        .is_err()
    {
        l.task.abort();
    }
    tracing::info!(addr = %l.requested, "metrics listener closed");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineHandle;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    fn free_addr() -> std::io::Result<SocketAddr> {
        std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
    }

    fn bindable(addr: SocketAddr) -> bool {
        std::net::TcpListener::bind(addr).is_ok()
    }

    /// The same address is kept (never bound twice), a failed load leaves the listener as it
    /// was and frees the address it tried, a load without `metrics_addr` closes it.
    #[tokio::test]
    async fn a_listener_is_kept_moved_or_closed_by_loads() -> TestResult {
        let engine = Arc::new(EngineHandle::spawn()?);
        let limits = Limits {
            max_open: 8,
            max_handshakes: 4,
            handshake: Duration::from_secs(5),
            idle: Duration::from_secs(5),
        };
        let exporter = Exporter::new(engine.clone(), limits);
        let (a, b) = (free_addr()?, free_addr()?);
        exporter.around_load(Some(a), async { ((), true) }).await?;
        assert!(!bindable(a));
        exporter.around_load(Some(a), async { ((), true) }).await?;
        assert!(!bindable(a));
        exporter.around_load(Some(b), async { ((), false) }).await?;
        assert!(!bindable(a) && bindable(b));
        exporter.around_load(Some(b), async { ((), true) }).await?;
        assert!(bindable(a) && !bindable(b));
        let taken = std::net::TcpListener::bind(a)?;
        let err = exporter.around_load(Some(a), async { ((), true) }).await;
        assert!(matches!(&err, Err(MetricsError::Bind { addr, .. }) if *addr == a));
        drop(taken);
        assert!(!bindable(b), "a refused address leaves the listener");
        exporter.around_load(None, async { ((), true) }).await?;
        assert!(bindable(b));
        engine.join(Duration::from_secs(3))?;
        Ok(())
    }
}
