//! A few minutes of once-a-second samples of the engine's counters: the tok/s rates come
//! from them (for `/metrics` and the page's chart), counted as steps run.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::engine::Snapshot;

/// How often the listener samples.
pub const EVERY: Duration = Duration::from_secs(1);
/// Samples kept: five minutes.
const KEPT: usize = 300;
/// The rates `/metrics` reports are over this many seconds.
const RATE_WINDOW: usize = 5;

/// One second's view.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Tokens a second since the sample before.
    pub prompt_tps: f64,
    pub generation_tps: f64,
    pub queued: usize,
    pub running: usize,
    pub kv_reserved_bytes: usize,
}

#[derive(Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Records `snapshot`'s counters now.
    pub fn sample(&self, snapshot: &Snapshot) {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let (m, t) = (&snapshot.metrics, snapshot.metrics.throughput);
        let mut samples = self.lock();
        let (prompt_tps, generation_tps) = match samples.back() {
            // A reload starts the counters again: no rate across it.
            Some(last) if t.generated_tokens >= last.generated_tokens => (
                rate(t.prompt_tokens, last.prompt_tokens, at - last.at),
                rate(t.generated_tokens, last.generated_tokens, at - last.at),
            ),
            _ => (0.0, 0.0),
        };
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at,
            prompt_tokens: t.prompt_tokens,
            generated_tokens: t.generated_tokens,
            prompt_tps,
            generation_tps,
            queued: m.queued,
            running: m.running,
            kv_reserved_bytes: m.kv_reserved_bytes,
        });
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.lock().iter().copied().collect()
    }

    /// Prompt and generation tokens a second over the last few seconds.
    pub fn rates(&self) -> (f64, f64) {
        let samples = self.lock();
        let recent = samples.iter().rev().take(RATE_WINDOW);
        let (n, prompt, generation) = recent.fold((0.0, 0.0, 0.0), |(n, p, g), s| {
            (n + 1.0, p + s.prompt_tps, g + s.generation_tps)
        });
        match n > 0.0 {
            true => (prompt / n, generation / n),
            false => (0.0, 0.0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn rate(now: u64, before: u64, secs: f64) -> f64 {
    match secs > 0.0 {
        true => now.saturating_sub(before) as f64 / secs,
        false => 0.0,
    }
}
