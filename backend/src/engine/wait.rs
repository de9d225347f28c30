//! A LoadModel's wait for its workers (P2P discovery, their ranks given, the joins on rank
//! 0's control channel) on a thread of its own. The wait is network only, no MLX, so the
//! engine thread keeps serving the current model meanwhile and takes the result as a
//! command (`Command::Waited`). The wait ends at its next tick when the LoadModel's caller
//! leaves (its deadline passed or it cancelled), when Free or a newer LoadModel cancels it,
//! or when the process stops.

use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::cluster_load::{self, Joined};
use super::core::Command;
use super::p2p_load::{self, Found};
use crate::distributed::Hostfile;
use crate::error::{Error, Result};
use crate::options::LoadConfig;

/// A LoadModel's answer, shared by the engine thread (which sends it) and the wait (which
/// looks at whether the caller is still there).
pub struct Reply(Mutex<Option<oneshot::Sender<Result<()>>>>);

impl Reply {
    pub fn new(tx: oneshot::Sender<Result<()>>) -> Arc<Reply> {
        Arc::new(Reply(Mutex::new(Some(tx))))
    }

    /// Whether the caller left: tonic drops the handler, and with it the receiver, when the
    /// client's deadline passes or it cancels.
    pub fn closed(&self) -> bool {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tx.as_ref().is_none_or(|tx| tx.is_closed())
    }

    /// Answers the caller (once; a caller that left hears nothing).
    pub fn send(&self, result: Result<()>) {
        let tx = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(result);
        }
    }
}

/// What a wait waits for.
pub enum Job {
    /// P2P: browse for the workers `config.p2p` asks for.
    Discover,
    /// Give the P2P workers `found` their ranks (when there are any), then wait for every
    /// worker of `hostfile` to join rank 0's control channel.
    Form {
        hostfile: Hostfile,
        found: Option<Box<Found>>,
    },
}

/// What a wait produced.
pub enum Waited {
    Found(Box<Found>),
    /// The workers of `hostfile` joined rank 0's control channel.
    Joined {
        hostfile: Hostfile,
        joined: Box<Joined>,
    },
}

/// A wait's outcome, posted to the engine thread; `id` tells a cancelled wait's late
/// outcome from the current one's.
pub struct Outcome {
    pub id: u64,
    pub result: Result<Waited>,
}

/// The error a caller that left gets (nobody reads it; Status and the log show it).
fn caller_left() -> Error {
    Error::Aborted(
        "the LoadModel's caller left (its deadline passed or it cancelled), so its wait for \
         workers was given up"
            .into(),
    )
}

/// The error of a load over a cluster whose caller left while the workers loaded: they are
/// told to drop their parts (nobody reads it; Status and the log show it).
pub fn caller_left_load() -> Error {
    Error::Aborted(
        "the LoadModel's caller left (its deadline passed or it cancelled) while the workers \
         loaded their parts, so the load was given up and they dropped them"
            .into(),
    )
}

/// A LoadModel whose wait is running: the engine thread's handle on it.
pub struct Pending {
    pub id: u64,
    pub config: Box<LoadConfig>,
    pub reply: Arc<Reply>,
    /// Why the engine cancelled it, once it did.
    cancel: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Pending {
    /// Starts `job` for `config` on a thread that posts its `Outcome` to `post`.
    pub fn start(
        id: u64,
        config: Box<LoadConfig>,
        reply: Arc<Reply>,
        job: Job,
        post: mpsc::Sender<Command>,
    ) -> Result<Pending> {
        let cancel = Arc::new(Mutex::new(None));
        let (their_cancel, their_reply) = (cancel.clone(), reply.clone());
        let their_config = config.clone();
        let thread = std::thread::Builder::new()
            .name("load-wait".into())
            .spawn(move || {
                let give_up = || {
                    if their_reply.closed() {
                        return Some(caller_left());
                    }
                    let why = their_cancel.lock().unwrap_or_else(|e| e.into_inner());
                    why.clone().map(Error::Aborted)
                };
                let result = run(&their_config, job, &give_up);
                let _ = post.send(Command::Waited(Box::new(Outcome { id, result })));
            })
            .map_err(|e| Error::Internal(format!("cannot start the load's wait thread: {e}")))?;
        Ok(Pending {
            id,
            config,
            reply,
            cancel,
            thread: Some(thread),
        })
    }

    /// Ends the wait at its next tick; its caller is told `why` (ABORTED) at once.
    pub fn cancel(&mut self, why: &str) -> Option<JoinHandle<()>> {
        *self.cancel.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
        self.reply.send(Err(Error::Aborted(why.to_string())));
        self.thread.take()
    }

    /// The wait's thread, which ends right after posting its outcome.
    pub fn thread(&mut self) -> Option<JoinHandle<()>> {
        self.thread.take()
    }

    /// Whether the caller left.
    pub fn abandoned(&self) -> Option<Error> {
        self.reply.closed().then(caller_left)
    }
}

/// Runs `job`: network only, so it never touches MLX or the engine's state.
fn run(config: &LoadConfig, job: Job, give_up: crate::distributed::GiveUp<'_>) -> Result<Waited> {
    match job {
        Job::Discover => {
            let p2p = config
                .p2p
                .as_ref()
                .ok_or_else(|| Error::Internal("a P2P wait without P2P options".into()))?;
            let found = p2p_load::discover(p2p, config.cluster.transport, give_up)?;
            Ok(Waited::Found(Box::new(found)))
        }
        Job::Form { hostfile, found } => {
            if let Some(found) = &found {
                found.assign()?;
            }
            let joined = cluster_load::connect(config, &hostfile, give_up)?;
            Ok(Waited::Joined {
                hostfile,
                joined: Box::new(joined),
            })
        }
    }
}

/// Waits up to `limit` for a wait's thread to end (a cancelled one ends at its next tick,
/// about 50 ms); one still running then is left to end by itself, and the log says so.
pub fn join_within(thread: Option<JoinHandle<()>>, limit: Duration) {
    let Some(thread) = thread else { return };
    let deadline = Instant::now() + limit;
    while !thread.is_finished() {
        if Instant::now() >= deadline {
            tracing::warn!("a cancelled LoadModel's wait did not end within {limit:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = thread.join();
}
