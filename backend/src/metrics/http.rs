//! The listener's routes, on axum (tokio and hyper, as tonic already runs on): `/metrics`,
//! `/` (the status page, embedded in the binary) and `/status.json` (what the page polls).

use std::sync::{Arc, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::oneshot;

use super::exposition::{render, state_name};
use super::history::EVERY;
use super::Sources;
use crate::listener::Guarded;

/// The status page: HTML, CSS and script in one file, no assets from elsewhere.
const PAGE: &str = include_str!("page.html");

/// Samples kept in `/status.json` for the chart (two minutes).
const CHART_SAMPLES: usize = 120;

/// The status JSON as last rendered (empty until the first sample).
#[derive(Default)]
pub(crate) struct Rendered {
    status: Bytes,
}

/// Serves `socket` until `stopped` fires, sampling the engine once a second meanwhile and
/// rendering `/status.json` then, once for all the requests of that second.
pub async fn serve(socket: Guarded, sources: Arc<Sources>, stopped: oneshot::Receiver<()>) {
    let app = Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/status.json", get(status))
        .layer(axum::middleware::map_response(close_after))
        .with_state(sources.clone());
    let served = axum::serve(socket, app).with_graceful_shutdown(async {
        let _ = stopped.await;
    });
    render_status(&sources);
    let sampling = async {
        let mut tick = tokio::time::interval(EVERY);
        loop {
            tick.tick().await;
            sources.history.sample(&sources.engine.snapshot());
            render_status(&sources);
        }
    };
    tokio::select! {
        done = served => {
            if let Err(e) = done {
                tracing::warn!("the metrics listener failed: {e}");
            }
        }
        () = sampling => {}
    }
}

/// Renders `/status.json` for the requests until the next sample.
fn render_status(sources: &Sources) {
    let status = Bytes::from(status_json(sources).to_string());
    let mut rendered = sources
        .rendered
        .write()
        .unwrap_or_else(PoisonError::into_inner);
    rendered.status = status;
}

/// One request per connection: a connection's one deadline then covers its whole request
/// head, and no connection lingers between a scraper's visits.
async fn close_after(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

async fn metrics(State(sources): State<Arc<Sources>>) -> Response {
    match render(&sources) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("metrics: {e}")).into_response(),
    }
}

/// The sampler's last `/status.json`: the bytes are shared, not copied.
async fn status(State(sources): State<Arc<Sources>>) -> Response {
    let body = {
        let rendered = sources
            .rendered
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        rendered.status.clone()
    };
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Everything the page shows, as JSON.
fn status_json(sources: &Sources) -> serde_json::Value {
    let s = sources.engine.snapshot();
    let m = &s.metrics;
    let (prompt_tps, generation_tps) = sources.history.rates();
    let samples = sources.history.samples();
    let chart = &samples[samples.len().saturating_sub(CHART_SAMPLES)..];
    serde_json::json!({
        "state": state_name(s.state),
        "model": s.model.as_ref().map(|m| m.config.model.clone()),
        "last_error": s.last_error,
        "queued": m.queued,
        "running": m.running,
        "kv_reserved_bytes": m.kv_reserved_bytes,
        "kv_budget_bytes": m.kv_budget_bytes,
        "prefix_cache": m.prefix_cache,
        "throughput": m.throughput,
        "prompt_tps": prompt_tps,
        "prefill_tps": sources.history.prefill_speed(),
        "generation_tps": generation_tps,
        "ranks": s.ranks.as_ref().map(|b| b.ranks()).unwrap_or_default(),
        "outcomes": sources.outcomes.counts(),
        "errors": sources.outcomes.recent_errors(),
        "history": chart,
    })
}
