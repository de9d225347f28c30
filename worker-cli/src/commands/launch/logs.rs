//! Each remote process's output, line by line, on the launcher's terminal with a prefix that
//! names the rank and host; the last lines are kept to explain a failure.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How many of a process's last lines a failure report quotes.
const TAIL_LINES: usize = 12;

/// The last lines a process wrote, from both its streams.
#[derive(Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, indented under a failure message.
    pub fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().map(|l| format!("\n    {l}")).collect()
    }
}

/// Which of the launcher's streams a remote stream goes to.
#[derive(Clone, Copy)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Copies `pipe` line by line to `to`, each line prefixed `[label] `, until it closes.
pub fn forward(
    pipe: impl Read + Send + 'static,
    label: &str,
    to: Stream,
    tail: Tail,
) -> std::io::Result<JoinHandle<()>> {
    let prefix = format!("[{label}] ");
    std::thread::Builder::new()
        .name(format!("log {label}"))
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut bytes = Vec::new();
            while matches!(reader.read_until(b'\n', &mut bytes), Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&bytes).trim_end().to_string();
                bytes.clear();
                let shown = format!("{prefix}{line}\n");
                // The terminal going away must not stop the ranks: a write error is ignored.
                let _ = match to {
                    Stream::Stdout => std::io::stdout().lock().write_all(shown.as_bytes()),
                    Stream::Stderr => std::io::stderr().lock().write_all(shown.as_bytes()),
                };
                tail.push(line);
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines() -> std::io::Result<()> {
        let text: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let tail = Tail::default();
        let reader = std::io::Cursor::new(text.into_bytes());
        forward(reader, "rank 1 h", Stream::Stderr, tail.clone())?
            .join()
            .map_err(|_| std::io::Error::other("the log thread panicked"))?;
        let kept = tail.text();
        assert!(
            kept.contains("line 19") && kept.contains("line 8"),
            "{kept}"
        );
        assert!(!kept.contains("line 7\n"), "{kept}");
        Ok(())
    }
}
