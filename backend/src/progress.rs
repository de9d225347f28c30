//! What reaches the terminal: progress of long steps (loading and sharding a model), a live
//! line on a terminal and a log line at every quarter otherwise, so a minutes-long load of a
//! big model is never silent; and the process's log, coloured only on a terminal.

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

/// Whether `stream` gets colour codes: only a terminal does, and never with `NO_COLOR` set
/// (<https://no-color.org>), so a log kept in a file or read through a pipe is plain text.
pub fn colour(stream: &impl IsTerminal) -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    stream.is_terminal() && !no_color
}

/// The process's log on stderr, filtered by `RUST_LOG` (else `default`), coloured by
/// [`colour`]: the one set-up the binaries share.
pub fn init_log(default: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}
