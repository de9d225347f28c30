//! Progress of long steps (loading and sharding a model): a live line on a terminal, and a
//! log line at every quarter otherwise, so a minutes-long load of a big model is never silent.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub struct Progress {
    label: &'static str,
    total: usize,
    done: usize,
    tty: bool,
    start: Instant,
}

impl Progress {
    pub fn new(label: &'static str, total: usize) -> Progress {
        Progress {
            label,
            total: total.max(1),
            done: 0,
            tty: std::io::stderr().is_terminal(),
            start: Instant::now(),
        }
    }

    /// One more unit done.
    pub fn tick(&mut self) {
        self.done += 1;
        let secs = self.start.elapsed().as_secs_f64();
        if self.tty {
            eprint!(
                "\r{} {}/{} ({secs:.1} s)",
                self.label, self.done, self.total
            );
            if self.done >= self.total {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else if (self.done * 4 / self.total) > ((self.done - 1) * 4 / self.total) {
            tracing::info!(done = self.done, total = self.total, secs, "{}", self.label);
        }
    }
}
