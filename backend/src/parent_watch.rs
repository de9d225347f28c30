//! Stop when the process that started us dies, as LocalAI's backends do:
//! `LOCALAI_BACKEND_PARENT_WATCH` (on unless falsy), `LOCALAI_BACKEND_PARENT_WATCH_INTERVAL` (Go duration, 2s).
//! The watch asks for the same orderly stop as SIGTERM; the process then exits with 1.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::lifecycle;

const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// How often the watch looks for a stop, so that joining it is quick.
const TICK: Duration = Duration::from_millis(100);

/// The watcher thread; it ends when the parent goes or a stop is requested.
pub struct ParentWatch {
    thread: JoinHandle<bool>,
}

impl ParentWatch {
    /// Waits for the watch to end (call after requesting a stop); true if the parent went.
    pub fn join(self) -> bool {
        self.thread.join().unwrap_or(false)
    }
}

/// Starts the watcher thread unless it is turned off or there is no parent to watch.
pub fn start_from_env() -> Option<ParentWatch> {
    let enabled = std::env::var("LOCALAI_BACKEND_PARENT_WATCH")
        .map(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "false" | "0" | "no" | "off"
            )
        })
        .unwrap_or(true);
    if !enabled {
        return None;
    }
    let interval = std::env::var("LOCALAI_BACKEND_PARENT_WATCH_INTERVAL")
        .ok()
        .and_then(|v| parse_go_duration(&v))
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_INTERVAL);
    let parent = std::os::unix::process::parent_id();
    if parent <= 1 {
        return None;
    }
    let thread = std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || watch(parent, interval))
        .ok()?;
    Some(ParentWatch { thread })
}

/// True once the parent is gone (and a stop requested); false when stopped otherwise.
fn watch(parent: u32, interval: Duration) -> bool {
    let mut next = Instant::now() + interval;
    while !lifecycle::stop_requested() {
        std::thread::sleep(TICK);
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + interval;
        let now = std::os::unix::process::parent_id();
        if now != parent || now == 1 {
            tracing::error!(
                parent,
                "the parent process exited without stopping this backend; shutting down"
            );
            lifecycle::request_stop();
            return true;
        }
    }
    false
}

/// Parses Go's `time.ParseDuration` form: `1.5s`, `300ms`, `1m30s`, `2h`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("2"), None);
        assert_eq!(parse_go_duration("abc"), None);
    }
}
