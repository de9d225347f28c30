//! `/metrics`: the engine's snapshot, the outcomes and the rates, written with the
//! `prometheus` crate's types and text encoder into a registry made for each scrape (the
//! values live in the snapshot; nothing is counted twice).

use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, Opts, Registry,
    TextEncoder,
};

use super::Sources;
use crate::distributed::{Health, RankState};
use crate::engine::{EngineState, Snapshot};

const PREFIX: &str = "mlx_distributed";

/// The Prometheus text of everything `sources` know now.
pub fn render(sources: &Sources) -> prometheus::Result<String> {
    let snapshot = sources.engine.snapshot();
    let registry = Registry::new_custom(Some(PREFIX.into()), None)?;
    requests(&registry, sources)?;
    engine(&registry, &snapshot)?;
    let (prompt_tps, generation_tps) = sources.history.rates();
    gauge(
        &registry,
        "prompt_tokens_per_second",
        "Prompt tokens prefilled a second (last 5 s)",
        prompt_tps,
    )?;
    gauge(
        &registry,
        "generation_tokens_per_second",
        "Tokens generated a second (last 5 s)",
        generation_tps,
    )?;
    if let Some(board) = &snapshot.ranks {
        ranks(&registry, &board.ranks())?;
    }
    let mut text = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut text)?;
    String::from_utf8(text).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> prometheus::Result<C> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(registry: &Registry, name: &str, help: &str, value: f64) -> prometheus::Result<()> {
    register(registry, Gauge::new(name, help)?)?.set(value);
    Ok(())
}

fn counter(registry: &Registry, name: &str, help: &str, value: u64) -> prometheus::Result<()> {
    register(registry, IntCounter::new(name, help)?)?.inc_by(value);
    Ok(())
}

/// Requests by outcome: a finish reason (stop, length, grammar), `cancelled` (the client
/// left), or the gRPC status code of the error.
fn requests(registry: &Registry, sources: &Sources) -> prometheus::Result<()> {
    let opts = Opts::new("requests_total", "Requests by how they ended");
    let by = register(registry, IntCounterVec::new(opts, &["outcome"])?)?;
    for (outcome, n) in sources.outcomes.counts() {
        by.with_label_values(&[outcome.as_str()]).inc_by(n);
    }
    Ok(())
}

/// The engine's state, queue, rows, KV memory, prefix cache and token counts.
fn engine(registry: &Registry, snapshot: &Snapshot) -> prometheus::Result<()> {
    let m = &snapshot.metrics;
    let opts = Opts::new("engine_state", "1 for the engine's current state");
    let state = register(registry, GaugeVec::new(opts, &["state"])?)?;
    state
        .with_label_values(&[state_name(snapshot.state)])
        .set(1.0);
    if let Some(model) = &snapshot.model {
        let opts = Opts::new(
            "cpu_numerics",
            "1 for the numerics packed products run with",
        );
        let numerics = register(registry, GaugeVec::new(opts, &["numerics"])?)?;
        let name = if model.weights.int8 { "int8" } else { "exact" };
        numerics.with_label_values(&[name]).set(1.0);
    }
    let p = &m.prefix_cache;
    let gauges = [
        ("queue_depth", "Requests waiting for a batch row", m.queued),
        ("running_rows", "Batch rows running", m.running),
        (
            "kv_reserved_bytes",
            "KV bytes held for running requests",
            m.kv_reserved_bytes,
        ),
        (
            "kv_budget_bytes",
            "KV bytes requests and the prefix cache may hold",
            m.kv_budget_bytes,
        ),
        (
            "prefix_cache_bytes",
            "KV bytes the prefix cache holds",
            p.bytes,
        ),
        (
            "prefix_cache_entries",
            "Entries in the prefix cache",
            p.entries,
        ),
    ];
    for (name, help, value) in gauges {
        gauge(registry, name, help, value as f64)?;
    }
    counts(registry, snapshot)
}

/// The prefix cache's and the tokens' counters.
fn counts(registry: &Registry, snapshot: &Snapshot) -> prometheus::Result<()> {
    let (p, t) = (&snapshot.metrics.prefix_cache, snapshot.metrics.throughput);
    let counters = [
        (
            "prefix_cache_hits_total",
            "Prompts that started from a cached prefix",
            p.hits,
        ),
        (
            "prefix_cache_misses_total",
            "Prompts with no cached prefix",
            p.misses,
        ),
        (
            "prefix_cache_reused_tokens_total",
            "Prompt tokens a cached prefix held",
            p.reused_tokens,
        ),
        (
            "prompt_tokens_total",
            "Prompt tokens prefilled",
            t.prompt_tokens,
        ),
        (
            "generated_tokens_total",
            "Tokens generated",
            t.generated_tokens,
        ),
    ];
    for (name, help, value) in counters {
        counter(registry, name, help, value)?;
    }
    let prefill = Counter::new(
        "prefill_seconds_total",
        "Time spent prefilling prompt tokens",
    )?;
    add(&register(registry, prefill)?, t.prefill_secs);
    Ok(())
}

/// Each rank's health, link errors and step time by phase.
fn ranks(registry: &Registry, ranks: &[RankState]) -> prometheus::Result<()> {
    let opts = Opts::new(
        "rank_up",
        "1 while rank 0 hears from the rank, 0 once it is lost",
    );
    let up = register(registry, GaugeVec::new(opts, &["rank", "address", "part"])?)?;
    let opts = Opts::new(
        "rank_link_errors_total",
        "Failures of the rank's control connection",
    );
    let errors = register(registry, IntCounterVec::new(opts, &["rank"])?)?;
    let opts = Opts::new("rank_steps_total", "Steps the rank ran");
    let steps = register(registry, IntCounterVec::new(opts, &["rank"])?)?;
    let help = "Seconds of the rank's steps by phase (compute, communication, waiting)";
    let opts = Opts::new("rank_step_seconds_total", help);
    let seconds = register(registry, CounterVec::new(opts, &["rank", "phase"])?)?;
    for r in ranks {
        let rank = r.rank.to_string();
        let alive = f64::from(u8::from(r.health == Health::Up));
        up.with_label_values(&[rank.as_str(), &r.address, &r.part])
            .set(alive);
        errors
            .with_label_values(&[rank.as_str()])
            .inc_by(r.link_errors);
        steps
            .with_label_values(&[rank.as_str()])
            .inc_by(r.times.steps);
        let t = &r.times;
        for (phase, secs) in [
            ("compute", t.compute_secs),
            ("communication", t.communication_secs),
            ("waiting", t.waiting_secs),
        ] {
            add(&seconds.with_label_values(&[rank.as_str(), phase]), secs);
        }
    }
    Ok(())
}

/// A counter's value (a negative or non-finite one is never measured; it stays 0).
fn add(c: &Counter, v: f64) {
    if v.is_finite() && v > 0.0 {
        c.inc_by(v);
    }
}

pub fn state_name(state: EngineState) -> &'static str {
    match state {
        EngineState::Uninitialized => "uninitialized",
        EngineState::Loading => "loading",
        EngineState::Ready => "ready",
        EngineState::Busy => "busy",
        EngineState::Error => "error",
        EngineState::Degraded => "degraded",
        EngineState::Stopped => "stopped",
        EngineState::Failed => "failed",
    }
}
