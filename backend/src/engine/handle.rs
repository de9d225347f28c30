//! The narrow interface between the gRPC service and the engine thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc as tmpsc, oneshot};

use super::batch::InFlight;
use super::core::{self, Command};
use super::guard;
use super::shared::Snapshot;
use crate::error::{Error, Result};
use crate::lifecycle::ExitError;
use crate::options::LoadConfig;
use crate::request::{Event, GenerateRequest};

/// Events of one generation; dropping the receiver cancels it within one step.
pub type EventStream = tmpsc::UnboundedReceiver<Result<Event>>;

/// What the service needs from an engine.
pub trait Engine: Send + Sync + 'static {
    /// Loads (or swaps in) a model; resolves when it is ready or has failed.
    fn load(&self, config: LoadConfig) -> oneshot::Receiver<Result<()>>;
    /// Queues a generation.
    fn generate(&self, request: GenerateRequest) -> Result<EventStream>;
    /// Releases the model.
    fn free(&self) -> oneshot::Receiver<Result<()>>;
    /// The state as last published, without waiting for the engine thread.
    fn snapshot(&self) -> Snapshot;
}

/// Sends commands to the engine thread it owns.
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    shared: Arc<RwLock<Snapshot>>,
    /// Requests accepted and not yet answered (running and queued).
    in_flight: Arc<AtomicUsize>,
    /// The engine thread, until `join` takes it.
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EngineHandle {
    /// Starts the engine thread (single node).
    pub fn spawn() -> Result<EngineHandle> {
        let (commands, rx) = mpsc::channel();
        let channel = core::Channel {
            commands: rx,
            post: commands.clone(),
        };
        let shared = Arc::new(RwLock::new(Snapshot::default()));
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || guard::run_guarded(channel, thread_shared))
            .map_err(|e| Error::Internal(format!("cannot start the engine thread: {e}")))?;
        Ok(EngineHandle {
            commands,
            shared,
            in_flight: Arc::new(AtomicUsize::new(0)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks the engine thread to fail every request (UNAVAILABLE, shutting down), drop the
    /// model and end; returns at once.
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Shutdown);
    }

    /// Stops the engine thread and waits up to `limit` for it to end.
    pub fn join(&self, limit: Duration) -> Result<(), ExitError> {
        self.stop();
        let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(());
        };
        let deadline = Instant::now() + limit;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                return Err(ExitError::Stuck {
                    what: "the engine thread",
                    limit,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A panic was printed where it happened; the thread is gone either way.
        let _ = thread.join();
        Ok(())
    }

    /// Sends a command that answers once; if the engine is gone, the receiver reports it closed.
    fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T>>) -> Command,
    ) -> oneshot::Receiver<Result<T>> {
        let (reply, rx) = oneshot::channel();
        let _ = self.commands.send(command(reply));
        rx
    }
}

/// The engine thread holds a sender of its own channel, so it ends on `Shutdown`, never on
/// the channel closing.
impl Drop for EngineHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Engine for EngineHandle {
    fn load(&self, config: LoadConfig) -> oneshot::Receiver<Result<()>> {
        self.ask(|reply| Command::Load {
            config: Box::new(config),
            reply,
        })
    }

    fn generate(&self, request: GenerateRequest) -> Result<EventStream> {
        // Counted until answered (the guard gives it back); refused at once when every batch
        // row is taken and the queue is full.
        let before = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let in_flight = Some(InFlight(self.in_flight.clone()));
        if let Some(m) = self.snapshot().model {
            let bound = m.config.limits.max_batch + m.config.limits.max_queue;
            if before >= bound {
                return Err(Error::Overloaded(format!(
                    "{bound} requests are running or queued (max_batch {} + max_queue {}); \
                     retry later",
                    m.config.limits.max_batch, m.config.limits.max_queue
                )));
            }
        }
        let (events, rx) = tmpsc::unbounded_channel();
        self.commands
            .send(Command::Generate {
                request: Box::new(request),
                events,
                in_flight,
            })
            .map_err(|_| Error::Internal("the engine thread has stopped".into()))?;
        Ok(rx)
    }

    fn free(&self) -> oneshot::Receiver<Result<()>> {
        self.ask(|reply| Command::Free { reply })
    }

    fn snapshot(&self) -> Snapshot {
        let snapshot = self.shared.read().map(|s| s.clone()).unwrap_or_default();
        snapshot.settled()
    }
}
