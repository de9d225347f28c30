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
/// The prefill speed is over this many: prefills come in bursts, so a longer look back.
const PREFILL_WINDOW: usize = 10;

/// One second's view.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Seconds spent prefilling so far.
    pub prefill_secs: f64,
    /// Tokens a second since the sample before.
    pub prompt_tps: f64,
    pub generation_tps: f64,
    /// Prompt tokens a second of prefill time since the sample before: the prefill speed
    /// (`None` when nothing was prefilled).
    pub prefill_tps: Option<f64>,
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
        let (prompt_tps, generation_tps, prefill_tps) = match samples.back() {
            // A reload starts the counters again: no rate across it.
            Some(last) if t.generated_tokens >= last.generated_tokens => (
                rate(t.prompt_tokens, last.prompt_tokens, at - last.at),
                rate(t.generated_tokens, last.generated_tokens, at - last.at),
                speed(
                    t.prompt_tokens,
                    last.prompt_tokens,
                    t.prefill_secs - last.prefill_secs,
                ),
            ),
            _ => (0.0, 0.0, None),
        };
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at,
            prompt_tokens: t.prompt_tokens,
            generated_tokens: t.generated_tokens,
            prefill_secs: t.prefill_secs,
            prompt_tps,
            generation_tps,
            prefill_tps,
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

    /// Prompt tokens a second of prefill time over the last ten seconds: the prefill speed
    /// while prompts are prefilled, `None` when none was (or a reload restarted the counters).
    pub fn prefill_speed(&self) -> Option<f64> {
        let samples = self.lock();
        let window: Vec<&Sample> = samples.iter().rev().take(PREFILL_WINDOW + 1).collect();
        let (newest, oldest) = (window.first()?, window.last()?);
        let unbroken = window.windows(2).all(|pair| pair[0].follows(pair[1]));
        match unbroken {
            true => speed(
                newest.prompt_tokens,
                oldest.prompt_tokens,
                newest.prefill_secs - oldest.prefill_secs,
            ),
            false => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sample {
    /// Whether this sample's counters go on from `before`'s (a reload starts them again).
    fn follows(&self, before: &Sample) -> bool {
        self.generated_tokens >= before.generated_tokens
            && self.prompt_tokens >= before.prompt_tokens
    }
}

/// Tokens a second of `secs` of prefill; `None` when no token was prefilled.
fn speed(now: u64, before: u64, secs: f64) -> Option<f64> {
    match (now > before, secs > 0.0) {
        (true, true) => Some((now - before) as f64 / secs),
        _ => None,
    }
}

fn rate(now: u64, before: u64, secs: f64) -> f64 {
    match secs > 0.0 {
        true => now.saturating_sub(before) as f64 / secs,
        false => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, prompt_tokens: u64, prefill_secs: f64) -> Sample {
        Sample {
            at,
            prompt_tokens,
            generated_tokens: 0,
            prefill_secs,
            prompt_tps: 0.0,
            generation_tps: 0.0,
            prefill_tps: None,
            queued: 0,
            running: 0,
            kv_reserved_bytes: 0,
        }
    }

    /// 300 prompt tokens prefilled in 0.5 s over 3 s of wall time: the page shows 600 tok/s,
    /// not 100; once nothing is prefilled for the whole window, no speed at all.
    #[test]
    fn prefill_speed_is_over_prefill_time() {
        let history = History::default();
        let push = |s| history.lock().push_back(s);
        for (i, (tokens, secs)) in [(0, 0.0), (100, 0.2), (300, 0.5), (300, 0.5)]
            .into_iter()
            .enumerate()
        {
            push(sample(i as f64, tokens, secs));
        }
        assert_eq!(history.prefill_speed(), Some(600.0));
        for i in 4..=4 + PREFILL_WINDOW {
            push(sample(i as f64, 300, 0.5));
        }
        assert_eq!(history.prefill_speed(), None);
        // A reload restarts the counters: no speed across it.
        push(sample(20.0, 10, 0.01));
        assert_eq!(history.prefill_speed(), None);
    }
}
