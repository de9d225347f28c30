//! A worker's side of the control channel: connect to rank 0 (waiting as long as it takes;
//! the handshake is `join::connect`), then receive plans; pings are answered off the main
//! thread, so a worker busy in MLX still counts as alive.

use std::net::TcpStream;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::lifecycle;

use super::inbox::Inbox;
use super::join::{self, LinkError, LinkOptions};
use super::protocol::{ToLeader, ToWorker};
use super::wire::{read_frame, write_frame};

/// How often a worker waiting on rank 0 looks for a stop.
const STOP_TICK: Duration = Duration::from_millis(100);

/// An accepted worker's connection to rank 0.
pub struct Link {
    messages: mpsc::Receiver<ToWorker>,
    /// Activations that come inside `Go` (a pipeline's decode-size steps).
    inbox: Arc<Inbox>,
    writer: Arc<Mutex<TcpStream>>,
    /// The reader thread, joined when the link is dropped.
    reader: Option<JoinHandle<()>>,
}

impl Link {
    /// Connects, retrying until rank 0 answers (or `until` passes: a `Retry` error); logs
    /// while it waits.
    pub fn wait_for_leader(opts: &LinkOptions, until: Option<Instant>) -> Result<Link, LinkError> {
        let mut last_log: Option<Instant> = None;
        loop {
            if lifecycle::stop_requested() {
                return Err(LinkError::Stopped);
            }
            if until.is_some_and(|t| Instant::now() >= t) {
                return Err(LinkError::Retry(format!(
                    "rank 0 did not come at {} in time",
                    opts.control
                )));
            }
            match Link::connect(opts) {
                Ok(link) => return Ok(link),
                Err(LinkError::Retry(why)) => {
                    if last_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::info!(control = %opts.control, "waiting for rank 0: {why}");
                        last_log = Some(Instant::now());
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt to join: the handshake (`join::connect`), then the reader.
    pub fn connect(opts: &LinkOptions) -> Result<Link, LinkError> {
        let stream = join::connect(opts)?;
        Link::serve(stream).map_err(|e| LinkError::Retry(e.to_string()))
    }

    /// Starts the reader: pings are answered at once, activations go to the inbox, everything
    /// else is queued.
    fn serve(stream: TcpStream) -> std::io::Result<Link> {
        let writer = Arc::new(Mutex::new(stream.try_clone()?));
        let (tx, messages) = mpsc::channel();
        let inbox = Arc::new(Inbox::default());
        let (pong, mail) = (writer.clone(), inbox.clone());
        let mut reader = stream;
        let reader = std::thread::Builder::new()
            .name("control-reader".into())
            .spawn(move || loop {
                match read_frame::<ToWorker>(&mut reader) {
                    Ok(ToWorker::Ping) => {
                        let mut w = pong.lock().unwrap_or_else(|e| e.into_inner());
                        let _ = write_frame(&mut *w, &ToLeader::Pong);
                    }
                    Ok(ToWorker::Go {
                        seq,
                        activations: Some(payload),
                    }) => mail.deliver(seq, payload.0),
                    Ok(msg) => {
                        if tx.send(msg).is_err() {
                            mail.close("this worker stopped reading");
                            return;
                        }
                    }
                    Err(e) => {
                        if !lifecycle::stop_requested() {
                            tracing::warn!("the connection to rank 0 ended: {e}");
                        }
                        mail.close(&format!("the connection to rank 0 ended: {e}"));
                        return;
                    }
                }
            })?;
        Ok(Link {
            messages,
            inbox,
            writer,
            reader: Some(reader),
        })
    }

    /// Where activations that come inside control messages arrive.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// The next message from rank 0; None once rank 0 is gone or a stop was requested.
    pub fn next_message(&self) -> Option<ToWorker> {
        // Checked before every message too: a busy rank may never wait.
        while !lifecycle::stop_requested() {
            match self.messages.recv_timeout(STOP_TICK) {
                Ok(msg) => return Some(msg),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        None
    }

    pub fn send(&self, msg: &ToLeader) -> std::io::Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        write_frame(&mut *w, msg)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Ok(w) = self.writer.lock() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
        // The shut socket ends the reader's read.
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
