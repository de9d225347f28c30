//! The engine thread: owns the loaded model, runs commands one at a time in arrival order.
//! Loading is in `load.rs` and `build.rs`, the published snapshot in `publish.rs`, the panic
//! guards in `guard.rs`.

use std::rc::Rc;
use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::batch::{kv_reservation, Batch, BatchLimits, InFlight, Waiting};
use super::guard::guard;
use super::load::WAIT_END_LIMIT;
use super::sharded::FormedCluster;
use super::shared::{degraded_message, EngineState, Snapshot};
use super::wait::{self, Outcome, Pending, Reply};
use crate::distributed::clear_groups;
use crate::distributed::protocol::{ToLeader, ToWorker};
use crate::distributed::Cluster;
use crate::error::{Error, Result};
use crate::loader::LoadedModel;
use crate::options::LoadConfig;
use crate::request::{Events, GenerateOptions, GenerateRequest, ModelSerial};

/// What the engine thread is asked to do, in arrival order.
pub enum Command {
    Load {
        config: Box<LoadConfig>,
        reply: oneshot::Sender<Result<()>>,
    },
    Generate {
        request: Box<GenerateRequest>,
        events: Events,
        /// Counts the request against the queue bound until it is answered.
        in_flight: Option<InFlight>,
    },
    Free {
        reply: oneshot::Sender<Result<()>>,
    },
    /// The engine's cluster saw a fault (posted by `Fault`): degrade if a model is on it.
    ClusterFault,
    /// A LoadModel's wait for its workers ended (posted by its thread, `wait.rs`).
    Waited(Box<Outcome>),
    /// Fail every request, drop the model, wait for MLX, and end the thread.
    Shutdown,
}

/// The model the engine holds, with the config it was loaded with.
pub(super) struct Loaded {
    pub(super) serial: ModelSerial,
    pub(super) model: LoadedModel,
    pub(super) config: LoadConfig,
    /// Bytes of KV memory the running requests and the prefix cache may hold together.
    pub(super) kv_budget: usize,
    /// Whether it is spread over the engine's cluster (`EngineThread::formed`).
    pub(super) on_cluster: bool,
}

/// What the engine serves.
pub(super) enum Serving {
    /// Nothing: at start, after Free, or after a load failed with nothing before it.
    Empty,
    Model(Box<Loaded>),
    /// A rank was lost under the model: requests fail with this until LoadModel forms the
    /// cluster again.
    Degraded(String),
}

impl Serving {
    pub(super) fn loaded(&self) -> Option<&Loaded> {
        match self {
            Serving::Model(l) => Some(l),
            Serving::Empty | Serving::Degraded(_) => None,
        }
    }

    pub(super) fn on_cluster(&self) -> bool {
        self.loaded().is_some_and(|l| l.on_cluster)
    }
}

/// How long the engine thread waits for its MLX stream before it ends.
const STREAM_LIMIT: Duration = Duration::from_secs(2);

/// The engine thread's command channel: it reads one end and gives the other to its
/// cluster, so that faults arrive as commands.
pub struct Channel {
    pub commands: mpsc::Receiver<Command>,
    pub post: mpsc::Sender<Command>,
}

impl EngineThread {
    /// An engine thread serving nothing, publishing to `shared`, its faults posted to `post`.
    pub(super) fn new(shared: Arc<RwLock<Snapshot>>, post: mpsc::Sender<Command>) -> Self {
        EngineThread {
            shared,
            post,
            serving: Serving::Empty,
            loads: 0,
            formed: None,
            batch: Batch::default(),
            pending: None,
            winding: None,
            waits: 0,
        }
    }
}

pub(super) fn run(channel: Channel, shared: Arc<RwLock<Snapshot>>) {
    let Channel { commands, post } = channel;
    let mut engine = EngineThread::new(shared, post);
    loop {
        // Between rounds, take every command that came; block only when there is no work.
        let command = match engine.batch.idle() {
            true => commands.recv().ok(),
            false => match commands.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => break,
            },
        };
        match command {
            None if engine.batch.idle() => break, // cannot happen: the thread holds a sender
            None => engine.round(),
            Some(Command::Load { config, reply }) => engine.on_load(config, Reply::new(reply)),
            Some(Command::Waited(outcome)) => engine.on_waited(*outcome),
            Some(Command::Generate {
                request,
                events,
                in_flight,
            }) => engine.enqueue(*request, events, in_flight),
            Some(Command::Free { reply }) => {
                engine.free();
                let _ = reply.send(Ok(()));
            }
            Some(Command::ClusterFault) => engine.on_cluster_fault(),
            Some(Command::Shutdown) => break,
        }
    }
    engine.finish();
}

/// The engine thread's state: what it serves, the cluster, and the requests.
pub(super) struct EngineThread {
    pub(super) shared: Arc<RwLock<Snapshot>>,
    /// The thread's own channel, for its cluster's faults.
    pub(super) post: mpsc::Sender<Command>,
    pub(super) serving: Serving,
    /// Models installed so far (the next one's serial).
    pub(super) loads: u64,
    /// The cluster, kept across loads while no rank is lost; a model may be served on it or not.
    pub(super) formed: Option<Rc<FormedCluster>>,
    pub(super) batch: Batch,
    /// The LoadModel waiting for its workers on its own thread, while this one serves.
    pub(super) pending: Option<Pending>,
    /// A cancelled wait's thread, joined before the next wait starts (it may hold the
    /// control port until its next tick).
    pub(super) winding: Option<std::thread::JoinHandle<()>>,
    /// Waits started so far (the next one's id).
    pub(super) waits: u64,
}

impl EngineThread {
    /// Fails every request with `e` and empties the prefix cache.
    pub(super) fn fail_all(&mut self, e: &Error) {
        self.batch.fail_all(e);
    }

    /// One round of the batch; a lost rank degrades the engine, a panic fails the round.
    pub(super) fn round(&mut self) {
        let Serving::Model(l) = &self.serving else {
            self.batch.fail_all(&Error::NotLoaded);
            return;
        };
        let formed = l.on_cluster.then(|| self.formed.clone()).flatten();
        self.publish(|s| s.state = EngineState::Busy);
        let limits = BatchLimits {
            max_batch: l.config.limits.max_batch,
            queue_timeout: Duration::from_secs(l.config.limits.queue_timeout_secs),
            kv_budget: l.kv_budget,
            prefill_budget: l.config.limits.prefill_step,
        };
        let (model, tok, batch) = (l.model.model.as_ref(), &l.model.tokenizer, &mut self.batch);
        let outcome = guard(|| match &formed {
            Some(s) => watched(&s.cluster, batch.senders(), || {
                batch.round(model, tok, &limits)
            }),
            None => batch.round(model, tok, &limits),
        });
        let lost = formed.as_ref().and_then(|s| s.cluster.fault().get());
        match (lost, outcome) {
            (Some(msg), _) => self.degrade(&msg),
            (None, Err(panic)) => self.after_panic(&panic),
            (None, Ok(Err(e))) => self.fail_all(&e),
            (None, Ok(Ok(done))) => self.count(&done),
        }
        if self.batch.idle() && self.serving.loaded().is_some() {
            self.publish(|s| s.state = EngineState::Ready);
        }
        self.publish_load();
    }

    /// The group is broken: forget it, and say so until the next LoadModel.
    pub(super) fn degrade(&mut self, lost: &str) {
        let msg = degraded_message(lost);
        self.batch.fail_all(&Error::RankLost(msg.clone()));
        self.serving = Serving::Degraded(msg.clone());
        self.formed = None;
        clear_groups();
        crate::memory::release();
        self.publish(|s| {
            s.state = EngineState::Degraded;
            s.model = None;
            s.last_error = Some(msg);
        });
        self.publish_load();
    }

    /// A fault was posted: if it is the current cluster's, the model on it degrades (a fault
    /// of a cluster since replaced is stale and ignored).
    pub(super) fn on_cluster_fault(&mut self) {
        let Some(lost) = self.formed.as_ref().and_then(|s| s.cluster.fault().get()) else {
            return;
        };
        match self.serving.on_cluster() {
            true => self.degrade(&lost),
            false => {
                self.formed = None;
                clear_groups();
            }
        }
    }

    pub(super) fn enqueue(
        &mut self,
        request: GenerateRequest,
        events: Events,
        in_flight: Option<InFlight>,
    ) {
        let l = match &self.serving {
            Serving::Model(l) => l,
            Serving::Degraded(msg) => return drop(events.send(Err(Error::RankLost(msg.clone())))),
            Serving::Empty => return drop(events.send(Err(Error::NotLoaded))),
        };
        if events.is_closed() {
            return; // the client left while the request was queued
        }
        match guard(|| admit(l, request)) {
            Ok(Ok((ids, options))) => self.batch.enqueue(Waiting {
                ids,
                options,
                events,
                since: Instant::now(),
                _in_flight: in_flight,
            }),
            Ok(Err(e)) => drop(events.send(Err(e))),
            Err(panic) => drop(events.send(Err(Error::Internal(format!(
                "the engine panicked preparing the request: {panic}"
            ))))),
        }
    }

    /// Ends the requests with `why` and drops the model being served.
    pub(super) fn unload(&mut self, why: &Error) {
        self.fail_all(why);
        self.serving = Serving::Empty;
        crate::memory::release();
    }

    /// Free: the requests end ABORTED, the model and the workers' parts go.
    pub(super) fn free(&mut self) {
        if let Some(mut p) = self.pending.take() {
            self.winding =
                p.cancel("Free cancelled this LoadModel while it waited for its workers");
        }
        let formed = self.formed.clone().filter(|_| self.serving.on_cluster());
        self.unload(&Error::Aborted("the model was freed".into()));
        if let Some(s) = formed {
            if let Err(e) = free_workers(&s) {
                tracing::warn!("workers did not confirm Free: {e}");
            }
        }
        self.publish(|s| *s = Snapshot::default());
    }

    /// The requests end UNAVAILABLE; the model, the batch and the cluster go first, then
    /// this thread's MLX stream must finish what they queued before the thread (and its MLX
    /// thread-locals) ends.
    pub(super) fn finish(mut self) {
        self.fail_all(&Error::ShuttingDown);
        if let Some(mut p) = self.pending.take() {
            wait::join_within(p.cancel("the backend is shutting down"), WAIT_END_LIMIT);
        }
        wait::join_within(self.winding.take(), WAIT_END_LIMIT);
        let EngineThread {
            shared,
            serving,
            formed,
            batch,
            ..
        } = self;
        drop((batch, serving, formed));
        if let Ok(mut s) = shared.write() {
            *s = Snapshot {
                state: EngineState::Stopped,
                last_error: Some(Error::ShuttingDown.to_string()),
                ..Snapshot::default()
            };
        }
        if let Err(e) = crate::lifecycle::synchronize_streams(STREAM_LIMIT) {
            tracing::error!("the engine thread ends with MLX work in flight: {e}");
        }
    }
}

/// Runs `f` with the cluster watched: a lost rank fails the running requests at once
/// (UNAVAILABLE), even while this thread is blocked in an MLX collective.
fn watched<T>(cluster: &Cluster, running: Vec<Events>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    cluster.fault().step_started(running);
    let _watching = Watching(cluster);
    f()
}

/// Ends `watched`'s watch even when `f` panics, so the wedged-rank watchdog is not armed by
/// a step that is no longer running.
struct Watching<'a>(&'a Cluster);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.fault().step_ended();
    }
}

/// Tells every worker to drop its part.
fn free_workers(s: &FormedCluster) -> Result<()> {
    s.cluster.broadcast(&ToWorker::Free)?;
    s.cluster.collect(
        "Free",
        std::time::Duration::from_secs(30),
        |_, msg| match msg {
            ToLeader::Freed => Ok(Some(())),
            _ => Ok(None),
        },
    )?;
    Ok(())
}

/// Checks a request (validated and tokenized at the edge) against the model being served:
/// its ids must be this model's, and its KV memory must fit the budget.
fn admit(l: &Loaded, request: GenerateRequest) -> Result<(Vec<u32>, GenerateOptions)> {
    if request.model != l.serial {
        return Err(Error::Aborted(
            "the model was replaced by LoadModel while the request was tokenized".into(),
        ));
    }
    let GenerateRequest { ids, options, .. } = request;
    let need = kv_reservation(l.model.model.as_ref(), ids.len(), &options);
    if need > l.kv_budget {
        return Err(Error::Overloaded(format!(
            "the request needs {} MiB of KV memory ({} prompt tokens + max_tokens {}), more \
             than the whole kv_memory_mb budget of {} MiB; lower max_tokens or raise kv_memory_mb",
            need.div_ceil(1 << 20),
            ids.len(),
            options.max_tokens,
            l.kv_budget >> 20
        )));
    }
    Ok((ids, options))
}

#[cfg(test)]
mod tests;
