//! Requests by how they ended, counted where every ending is seen: the gRPC layer (a request
//! refused before the engine saw it, failed, finished, or left by its client).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The last errors kept for the status page: a fixed count, each text cut to
/// `error::MESSAGE_LIMIT` bytes, so the page holds at most about 10 KiB of them.
const RECENT: usize = 10;

#[derive(Default)]
pub struct Outcomes {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    by_outcome: BTreeMap<String, u64>,
    recent: VecDeque<RecentError>,
}

/// A request's error, for the status page.
#[derive(Debug, Clone, Serialize)]
pub struct RecentError {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub outcome: String,
    pub message: String,
}

impl Outcomes {
    /// A request begins; its `Tally` counts how it ends ("cancelled" if dropped unfinished).
    pub fn start(self: &Arc<Self>) -> Tally {
        Tally {
            outcomes: Some(self.clone()),
        }
    }

    /// Requests so far by outcome.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.lock().by_outcome.clone()
    }

    /// The last errors, newest last.
    pub fn recent_errors(&self) -> Vec<RecentError> {
        self.lock().recent.iter().cloned().collect()
    }

    fn count(&self, outcome: &str, error: Option<&str>) {
        let mut counts = self.lock();
        *counts.by_outcome.entry(outcome.to_string()).or_default() += 1;
        if let Some(message) = error {
            if counts.recent.len() == RECENT {
                counts.recent.pop_front();
            }
            counts.recent.push_back(RecentError {
                at: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64(),
                outcome: outcome.to_string(),
                message: crate::error::bounded(message).into_owned(),
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One request's outcome, counted once.
pub struct Tally {
    outcomes: Option<Arc<Outcomes>>,
}

impl Tally {
    /// The request finished (`outcome`: its finish reason).
    pub fn finished(mut self, outcome: &str) {
        if let Some(o) = self.outcomes.take() {
            o.count(outcome, None);
        }
    }

    /// The request failed (`outcome`: the status code's name).
    pub fn failed(mut self, outcome: &str, message: &str) {
        if let Some(o) = self.outcomes.take() {
            o.count(outcome, Some(message));
        }
    }
}

impl Drop for Tally {
    /// Dropped unfinished: the client went away.
    fn drop(&mut self) {
        if let Some(o) = self.outcomes.take() {
            o.count("cancelled", None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each request counts once, under how it ended; one dropped unfinished was cancelled;
    /// only errors are kept for the page.
    #[test]
    fn outcomes_count_once() {
        let outcomes = Arc::new(Outcomes::default());
        outcomes.start().finished("stop");
        outcomes.start().finished("stop");
        outcomes
            .start()
            .failed("invalid_argument", "the prompt is empty");
        drop(outcomes.start());
        let counts = outcomes.counts();
        assert_eq!(counts.get("stop"), Some(&2));
        assert_eq!(counts.get("invalid_argument"), Some(&1));
        assert_eq!(counts.get("cancelled"), Some(&1));
        let recent = outcomes.recent_errors();
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].message, "the prompt is empty");
    }

    /// However many and however long the errors, the page keeps ten, each at most 1 KiB.
    #[test]
    fn recent_errors_are_bounded() {
        let outcomes = Arc::new(Outcomes::default());
        let long = "x".repeat(1 << 20);
        for _ in 0..25 {
            outcomes.start().failed("not_found", &long);
        }
        let recent = outcomes.recent_errors();
        assert_eq!(recent.len(), RECENT);
        assert!(recent
            .iter()
            .all(|e| e.message.len() <= crate::error::MESSAGE_LIMIT));
    }
}
