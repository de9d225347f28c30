//! The engine thread: owns the loaded model, runs commands one at a time in arrival order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::{mpsc, Arc, RwLock};

use tokio::sync::oneshot;

use std::time::{Duration, Instant};

use super::batch::{kv_reservation, Batch, BatchLimits, InFlight, Waiting};
use super::cluster_load::{self, Formed};
use super::p2p_load;
use super::sharded::Session;
use super::shared::{degraded_message, EngineState, ModelInfo, Snapshot};
use super::wait::{self, Job, Outcome, Pending, Reply, Waited};
use crate::cache::KvFormat;
use crate::distributed::clear_groups;
use crate::distributed::protocol::{ToLeader, ToWorker};
use crate::distributed::{Cluster, Fault, Hostfile};
use crate::error::{Error, Result};
use crate::grammar::Grammars;
use crate::loader::{self, LoadedModel};
use crate::options::LoadConfig;
use crate::request::{Events, GenerateOptions, GenerateRequest, ModelSerial, Summary};
use crate::source;
use crate::speculative::DraftModel;
use crate::tokenizer::Tokenizer;

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
struct Loaded {
    serial: ModelSerial,
    model: LoadedModel,
    config: LoadConfig,
    /// Bytes of KV memory the running requests and the prefix cache may hold together.
    kv_budget: usize,
    /// Whether it is spread over the engine's cluster (`EngineThread::session`).
    on_cluster: bool,
}

/// What the engine serves.
enum Serving {
    /// Nothing: at start, after Free, or after a load failed with nothing before it.
    Empty,
    Model(Box<Loaded>),
    /// A rank was lost under the model: requests fail with this until LoadModel forms the
    /// cluster again.
    Degraded(String),
}

impl Serving {
    fn loaded(&self) -> Option<&Loaded> {
        match self {
            Serving::Model(l) => Some(l),
            Serving::Empty | Serving::Degraded(_) => None,
        }
    }

    fn on_cluster(&self) -> bool {
        self.loaded().is_some_and(|l| l.on_cluster)
    }
}

/// How long the engine thread waits for its MLX stream before it ends.
const STREAM_LIMIT: Duration = Duration::from_secs(2);

/// Runs the engine thread; a panic that escapes it (one the command guards could not hold)
/// is published as `Failed`, so Health tells the host to restart the backend.
pub fn run_guarded(channel: Channel, shared: Arc<RwLock<Snapshot>>) {
    let publish_to = shared.clone();
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(channel, shared))) {
        let msg = format!("the engine thread failed: {}", panic_message(&*panic));
        tracing::error!("{msg}; restart the backend");
        if let Ok(mut s) = publish_to.write() {
            *s = Snapshot {
                state: EngineState::Failed,
                last_error: Some(msg),
                ..Snapshot::default()
            };
        }
    }
}

/// What a panic payload says.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `f`; a panic becomes `Err` with its message, so one bad command cannot end the thread.
fn guard<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// The engine thread's command channel: it reads one end and gives the other to its
/// cluster, so that faults arrive as commands.
pub struct Channel {
    pub commands: mpsc::Receiver<Command>,
    pub post: mpsc::Sender<Command>,
}

fn run(channel: Channel, shared: Arc<RwLock<Snapshot>>) {
    let Channel { commands, post } = channel;
    let mut engine = EngineThread {
        shared,
        post,
        serving: Serving::Empty,
        loads: 0,
        session: None,
        batch: Batch::default(),
        pending: None,
        winding: None,
        waits: 0,
    };
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
struct EngineThread {
    shared: Arc<RwLock<Snapshot>>,
    /// The thread's own channel, for its cluster's faults.
    post: mpsc::Sender<Command>,
    serving: Serving,
    /// Models installed so far (the next one's serial).
    loads: u64,
    /// The cluster, kept across loads while no rank is lost; a model may be served on it or not.
    session: Option<Rc<Session>>,
    batch: Batch,
    /// The LoadModel waiting for its workers on its own thread, while this one serves.
    pending: Option<Pending>,
    /// A cancelled wait's thread, joined before the next wait starts (it may hold the
    /// control port until its next tick).
    winding: Option<std::thread::JoinHandle<()>>,
    /// Waits started so far (the next one's id).
    waits: u64,
}

impl EngineThread {
    fn publish(&self, f: impl FnOnce(&mut Snapshot)) {
        if let Ok(mut s) = self.shared.write() {
            f(&mut s);
        }
    }

    /// Fails every request with `e` and empties the prefix cache.
    fn fail_all(&mut self, e: &Error) {
        self.batch.fail_all(e);
    }

    /// One round of the batch; a lost rank degrades the engine, a panic fails the round.
    fn round(&mut self) {
        let Serving::Model(l) = &self.serving else {
            self.batch.fail_all(&Error::NotLoaded);
            return;
        };
        let session = l.on_cluster.then(|| self.session.clone()).flatten();
        self.publish(|s| s.state = EngineState::Busy);
        let limits = BatchLimits {
            max_batch: l.config.max_batch,
            queue_timeout: Duration::from_secs(l.config.queue_timeout_secs),
            kv_budget: l.kv_budget,
            prefill_budget: l.config.prefill_step,
        };
        let (model, tok, batch) = (l.model.model.as_ref(), &l.model.tokenizer, &mut self.batch);
        let outcome = guard(|| match &session {
            Some(s) => watched(&s.cluster, batch.senders(), || {
                batch.round(model, tok, &limits)
            }),
            None => batch.round(model, tok, &limits),
        });
        let lost = session.as_ref().and_then(|s| s.cluster.fault().get());
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

    /// The batch's queue, rows and KV held, however the round ended (a failed one emptied it).
    fn publish_load(&self) {
        let (queued, running) = (self.batch.queued(), self.batch.running());
        let reserved = self.batch.reserved();
        self.publish(|s| {
            (s.metrics.queued, s.metrics.running) = (queued, running);
            s.metrics.kv_reserved_bytes = reserved;
        });
    }

    fn count(&self, done: &[Summary]) {
        let (cache, reserved) = (self.batch.cache_stats(), self.batch.reserved());
        let (grammar, speculation) = (self.batch.grammar_time(), self.batch.speculation());
        let throughput = self.batch.throughput();
        self.publish(|s| {
            s.metrics.prefix_cache = cache;
            s.metrics.kv_reserved_bytes = reserved;
            s.metrics.throughput = throughput;
            s.metrics.grammar = grammar;
            s.metrics.speculation = speculation;
            for summary in done {
                let m = &mut s.metrics;
                m.requests += 1;
                m.prompt_tokens_processed += summary.prompt_tokens as u64;
                m.tokens_generated += summary.generated_tokens as u64;
                m.last_tokens_per_second =
                    summary.generated_tokens as f64 / summary.decode_secs.max(1e-9);
            }
        });
    }

    /// The group is broken: forget it, and say so until the next LoadModel.
    fn degrade(&mut self, lost: &str) {
        let msg = degraded_message(lost);
        self.batch.fail_all(&Error::RankLost(msg.clone()));
        self.serving = Serving::Degraded(msg.clone());
        self.session = None;
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
    fn on_cluster_fault(&mut self) {
        let Some(lost) = self.session.as_ref().and_then(|s| s.cluster.fault().get()) else {
            return;
        };
        match self.serving.on_cluster() {
            true => self.degrade(&lost),
            false => {
                self.session = None;
                clear_groups();
            }
        }
    }

    /// A round panicked: its requests fail with INTERNAL naming the panic. Over a cluster the
    /// ranks may be out of step, so the engine degrades; alone it keeps the model, unless
    /// releasing the requests' caches panics too.
    fn after_panic(&mut self, panic: &str) {
        let msg = format!("the engine panicked in a generation step: {panic}");
        tracing::error!("{msg}");
        if self.serving.on_cluster() {
            return self.degrade(&msg);
        }
        let e = Error::Internal(msg.clone());
        if guard(|| self.fail_all(&e)).is_err() {
            self.batch = Batch::default();
            self.serving = Serving::Empty;
            crate::memory::release();
            self.publish(|s| {
                *s = Snapshot {
                    state: EngineState::Error,
                    last_error: Some(format!("{msg}; the model was dropped: LoadModel again")),
                    load_wait: s.load_wait.take(),
                    ..Snapshot::default()
                }
            });
        }
    }
}

/// LoadModel in two phases: the wait for workers on its own thread (`wait.rs`), while this
/// thread serves, then the load itself here.
impl EngineThread {
    /// A LoadModel: refused while another one waits for its workers (unless that one's
    /// caller left: then it is cancelled), started as a wait when it needs workers or peers,
    /// or run now.
    fn on_load(&mut self, config: Box<LoadConfig>, reply: Arc<Reply>) {
        if let Some(p) = &mut self.pending {
            if p.abandoned().is_none() {
                let model = crate::error::quote(&p.config.model);
                return reply.send(Err(Error::Aborted(format!(
                    "another LoadModel (`{model}`) is waiting for its workers; call LoadModel \
                     again once it has ended, or cancel it (its caller leaving or Free ends it)"
                ))));
            }
            self.winding = p.cancel("a newer LoadModel replaced it after its caller left");
            self.pending = None;
            self.publish(|s| s.load_wait = None);
        }
        let job = check_waits(&config).and_then(|()| self.wait_job(&config));
        match job {
            Err(e) => {
                self.after_failed_load(&e);
                reply.send(Err(e));
            }
            Ok(Some(job)) => self.start_wait(config, reply, job),
            Ok(None) => reply.send(self.load(*config, Ready::Now)),
        }
    }

    /// The wait `config` needs: P2P discovery, or the joins of a cluster other than the
    /// engine's (whose old cluster is left first: its workers must leave it to join).
    fn wait_job(&mut self, config: &LoadConfig) -> Result<Option<Job>> {
        if config.p2p.is_some() {
            return Ok(Some(Job::Discover));
        }
        let Some(hostfile) = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1) else {
            return Ok(None);
        };
        if cluster_load::reusable(self.session.as_ref(), &hostfile) {
            return Ok(None);
        }
        self.leave_cluster();
        Ok(Some(Job::Form {
            hostfile,
            found: None,
        }))
    }

    /// Starts `job` on its own thread; this thread serves until its outcome is posted.
    fn start_wait(&mut self, config: Box<LoadConfig>, reply: Arc<Reply>, job: Job) {
        wait::join_within(self.winding.take(), WAIT_END_LIMIT);
        self.waits += 1;
        let model = config.model.clone();
        match Pending::start(self.waits, config, reply.clone(), job, self.post.clone()) {
            Ok(p) => self.pending = Some(p),
            Err(e) => {
                self.after_failed_load(&e);
                return reply.send(Err(e));
            }
        }
        tracing::info!(%model, "LoadModel waits for its workers; serving goes on meanwhile");
        let serving = self.serving.loaded().is_some();
        self.publish(|s| {
            s.load_wait = Some(model);
            s.last_error = None;
            if !serving {
                s.state = EngineState::Loading;
            }
        });
    }

    /// A wait ended: a late outcome of a cancelled wait is dropped (a cluster it formed
    /// closes); otherwise the load goes on here, or waits again for the P2P workers' joins.
    fn on_waited(&mut self, outcome: Outcome) {
        let Some(mut p) = self.pending.take_if(|p| p.id == outcome.id) else {
            return;
        };
        wait::join_within(p.thread(), WAIT_END_LIMIT);
        self.publish(|s| s.load_wait = None);
        let result = match p.abandoned() {
            Some(left) => Err(left),
            None => outcome.result,
        };
        let ready = match result {
            Err(e) => {
                tracing::warn!(model = %p.config.model, "LoadModel's wait ended: {e}");
                self.after_failed_load(&e);
                return p.reply.send(Err(e));
            }
            Ok(Waited::Formed { hostfile, formed }) => Ready::Cluster {
                hostfile,
                formed: Some(formed),
            },
            Ok(Waited::Found(found)) => {
                if !cluster_load::reusable(self.session.as_ref(), &found.hostfile) {
                    self.leave_cluster();
                    let hostfile = found.hostfile.clone();
                    let found = Some(found);
                    return self.start_wait(p.config, p.reply, Job::Form { hostfile, found });
                }
                Ready::Cluster {
                    hostfile: found.hostfile.clone(),
                    formed: None,
                }
            }
        };
        let result = self.load(*p.config, ready);
        p.reply.send(result);
    }

    /// A load needs another cluster: the engine's workers must leave theirs to join it, and
    /// MLX holds one group at a time, so the model served on it (if any) ends now (ABORTED)
    /// and the cluster closes (its workers wait to join again).
    fn leave_cluster(&mut self) {
        if self.serving.on_cluster() {
            self.unload(&Error::Aborted(
                "the model was replaced by LoadModel over another cluster".into(),
            ));
            self.publish(|s| {
                s.model = None;
                s.cluster_fault = None;
                s.ranks = None;
                s.state = EngineState::Loading;
            });
        }
        self.session = None;
        clear_groups();
    }
}

impl EngineThread {
    fn enqueue(&mut self, request: GenerateRequest, events: Events, in_flight: Option<InFlight>) {
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

    /// LoadModel, all or nothing: the new model is built beside the one being served and
    /// replaces it only once complete; on failure the old one keeps serving.
    fn load(&mut self, config: LoadConfig, ready: Ready) -> Result<()> {
        self.publish(|s| {
            s.state = EngineState::Loading;
            s.last_error = None;
        });
        let outcome = match guard(|| self.build(&config, ready)) {
            Ok(outcome) => outcome,
            Err(panic) => Err(Error::Internal(format!("loading panicked: {panic}"))),
        };
        let result = match outcome {
            Ok(built) => {
                self.install(built);
                Ok(())
            }
            Err(e) => {
                self.after_failed_load(&e);
                Err(e)
            }
        };
        crate::memory::release();
        result
    }

    /// Loads `config`'s model, leaving the one being served in place (unless the load needs
    /// another cluster: its wait phase left the old one, see `leave_cluster`).
    fn build(&mut self, config: &LoadConfig, ready: Ready) -> Result<Built> {
        let draft = load_draft(config)?;
        let (hostfile, formed) = match ready {
            Ready::Now => {
                let h = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1);
                (h, None)
            }
            Ready::Cluster { hostfile, formed } => (Some(hostfile), formed),
        };
        let model = match &hostfile {
            Some(h) => {
                if formed.is_some() && self.serving.on_cluster() {
                    self.leave_cluster();
                }
                cluster_load::load(config, h, &mut self.session, formed)?
            }
            None => {
                let lookup = source::Lookup::of(config);
                let dir = source::resolve_with(&config.model, &lookup)?;
                let adapters = source::resolve_adapters(&config.adapters, &lookup)?;
                self.check_room(&dir, config)?;
                let recipe = loader::Recipe {
                    mode: config.weight_mode,
                    adapters: &adapters,
                };
                loader::load_adapted(&dir, recipe, config.kv_format)?
            }
        };
        let model_context = model.config["max_position_embeddings"]
            .as_u64()
            .map(|n| n as usize);
        let context = [config.context_size, config.max_kv_size, model_context]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(4096);
        Ok(Built {
            model,
            config: config.clone(),
            context,
            on_cluster: hostfile.is_some(),
            draft,
        })
    }

    /// Refuses a load that cannot fit beside the model being served, which stays resident
    /// until the new one is complete.
    fn check_room(&self, dir: &std::path::Path, config: &LoadConfig) -> Result<()> {
        let Some(old) = self.serving.loaded() else {
            return Ok(());
        };
        let need = loader::resident_estimate(dir, config.weight_mode)?;
        let free = crate::distributed::free_memory();
        if free == 0 || need <= free {
            return Ok(());
        }
        Err(Error::Overloaded(format!(
            "`{}` needs about {} MiB beside the loaded `{}`, and {} MiB is free: LoadModel keeps \
             the loaded model until the new one is complete; call Free first, then LoadModel",
            crate::error::quote(&config.model),
            need >> 20,
            crate::error::quote(&old.config.model),
            free >> 20
        )))
    }

    /// Serves `built` from now on: the requests of the old model end ABORTED.
    fn install(&mut self, built: Built) {
        self.unload(&Error::Aborted(
            "the model was replaced by LoadModel".into(),
        ));
        let kv_budget = kv_budget(&built.config);
        let cluster_fault = built.on_cluster.then(|| self.watch_cluster()).flatten();
        let ranks = built.on_cluster.then_some(self.session.as_ref()).flatten();
        let ranks = ranks.map(|s| s.cluster.board().clone());
        self.loads += 1;
        let serial = ModelSerial(self.loads);
        let info = ModelInfo {
            serial,
            config: built.config.clone(),
            tokenizer: built.model.tokenizer.clone(),
            context: built.context,
            weights: built.model.model.weight_stats(),
            grammars: Arc::new(grammars_for(&built)),
        };
        self.publish(|s| {
            *s = Snapshot {
                state: EngineState::Ready,
                model: Some(info),
                cluster_fault,
                ranks,
                metrics: super::shared::Metrics {
                    kv_budget_bytes: kv_budget,
                    ..Default::default()
                },
                ..Snapshot::default()
            }
        });
        self.batch = Batch::new(built.config.max_cache_entries).with_drafter(built.draft);
        self.serving = Serving::Model(Box::new(Loaded {
            serial,
            model: built.model,
            config: built.config,
            kv_budget,
            on_cluster: built.on_cluster,
        }));
    }

    /// The session's faults come to this thread as `ClusterFault` commands; returns its latch.
    fn watch_cluster(&self) -> Option<Arc<Fault>> {
        let fault = self.session.as_ref()?.cluster.fault();
        let post = self.post.clone();
        fault.post_to(Box::new(move || {
            let _ = post.send(Command::ClusterFault);
        }));
        Some(fault.clone())
    }

    /// Ends the requests with `why` and drops the model being served.
    fn unload(&mut self, why: &Error) {
        self.fail_all(why);
        self.serving = Serving::Empty;
        crate::memory::release();
    }

    /// The old model (if any) keeps serving; the error is the last one Status reports.
    fn after_failed_load(&mut self, e: &Error) {
        if let Error::RankLost(lost) = e {
            if self.serving.on_cluster() {
                return self.degrade(lost); // the served model was on the lost cluster
            }
            self.session = None;
            clear_groups();
        }
        let msg = e.to_string();
        let serving = self.serving.loaded().is_some();
        self.publish(|s| {
            if !serving {
                s.model = None;
            }
            s.state = match serving {
                true => EngineState::Ready,
                false => EngineState::Error,
            };
            s.last_error = Some(msg);
        });
    }

    /// Free: the requests end ABORTED, the model and the workers' parts go.
    fn free(&mut self) {
        if let Some(mut p) = self.pending.take() {
            self.winding =
                p.cancel("Free cancelled this LoadModel while it waited for its workers");
        }
        let session = self.session.clone().filter(|_| self.serving.on_cluster());
        self.unload(&Error::Aborted("the model was freed".into()));
        if let Some(s) = session {
            if let Err(e) = free_workers(&s) {
                tracing::warn!("workers did not confirm Free: {e}");
            }
        }
        self.publish(|s| *s = Snapshot::default());
    }

    /// The requests end UNAVAILABLE; the model, the batch and the cluster go first, then
    /// this thread's MLX stream must finish what they queued before the thread (and its MLX
    /// thread-locals) ends.
    fn finish(mut self) {
        self.fail_all(&Error::ShuttingDown);
        if let Some(mut p) = self.pending.take() {
            wait::join_within(p.cancel("the backend is shutting down"), WAIT_END_LIMIT);
        }
        wait::join_within(self.winding.take(), WAIT_END_LIMIT);
        let EngineThread {
            shared,
            serving,
            session,
            batch,
            ..
        } = self;
        drop((batch, serving, session));
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

/// What a load's wait phase left for the engine thread.
enum Ready {
    /// Nothing was waited for: a single node, or the engine's cluster reused (the hostfile
    /// is read now).
    Now,
    /// Over `hostfile`'s cluster: the workers the wait formed it with (`formed`), or the
    /// engine's own cluster when it is that one already.
    Cluster {
        hostfile: Hostfile,
        formed: Option<Box<Formed>>,
    },
}

/// How long a cancelled wait may take to end (it looks at its cancel every 20-50 ms).
const WAIT_END_LIMIT: Duration = Duration::from_secs(2);

/// The time options within the bounds their waits enforce, checked before anything is
/// unloaded, so a LoadModel with a bad one changes nothing.
fn check_waits(config: &LoadConfig) -> Result<()> {
    crate::distributed::check_join_timeout(Duration::from_secs(config.join_timeout_secs))?;
    if let Some(p2p) = &config.p2p {
        p2p_load::check_wait(p2p)?;
    }
    super::batch::check_queue_timeout(config.queue_timeout_secs)
}

/// A model loaded beside the one being served, not yet installed.
struct Built {
    model: LoadedModel,
    config: LoadConfig,
    context: usize,
    /// Whether it was loaded over the engine's cluster.
    on_cluster: bool,
    draft: Option<DraftModel>,
}

/// `config`'s draft model, on this rank only, before the model itself (so a draft that
/// cannot serve costs nothing): refused unless it tokenizes as the model does.
fn load_draft(config: &LoadConfig) -> Result<Option<DraftModel>> {
    let Some(name) = &config.draft_model else {
        return Ok(None);
    };
    let lookup = source::Lookup::of(config);
    let target = Tokenizer::load(&source::resolve_with(&config.model, &lookup)?)?;
    let refuse = |why: String| {
        Error::Config(format!(
            "DraftModel `{}` cannot draft for `{}`: {why}",
            crate::error::quote(name),
            crate::error::quote(&config.model)
        ))
    };
    let dir = source::resolve_with(name, &lookup).map_err(|e| refuse(e.to_string()))?;
    target
        .same_as(&Tokenizer::load(&dir).map_err(|e| refuse(e.to_string()))?)
        .map_err(|why| refuse(format!("its tokenizer differs ({why})")))?;
    let loaded = loader::load_with_kv(&dir, config.weight_mode, KvFormat::default())?;
    let vocab = target.vocab_size();
    Ok(Some(DraftModel::new(
        loaded.model,
        config.prefill_step,
        vocab,
    )))
}

/// The grammar compiler for `built`'s tokenizer, over its logits' width.
fn grammars_for(built: &Built) -> Grammars {
    let tok = &built.model.tokenizer;
    let vocab = built.model.config["vocab_size"]
        .as_u64()
        .map_or(tok.vocab_size(), |v| v as usize);
    let eos: Vec<u32> = tok.eos_ids().iter().copied().collect();
    let triggers = &built.config.grammar_triggers;
    Grammars::new(&built.model.dir, vocab, &eos, triggers)
}

/// Bytes of KV memory for `config`: its `kv_memory_mb`, or half of what is free once the
/// weights are in (the rest is for MLX's own buffers).
fn kv_budget(config: &LoadConfig) -> usize {
    let budget = match config.kv_memory_mb {
        Some(mb) => mb << 20,
        None => match crate::distributed::free_memory() {
            0 => usize::MAX,
            free => (free / 2) as usize,
        },
    };
    tracing::info!(kv_budget_mb = budget >> 20, "KV memory budget");
    budget
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
fn free_workers(s: &Session) -> Result<()> {
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
mod tests {
    use super::*;
    use crate::engine::fake::{self, FakeModel, Trouble};
    use crate::models::Queueing;
    use crate::options::{LoadRequest, NoEnv};
    use crate::request::Event;
    use tokio::sync::mpsc as tmpsc;

    type Rx = tmpsc::UnboundedReceiver<Result<Event>>;

    /// An engine thread's state, driven by hand on this thread (no channel, no MLX stream).
    fn engine() -> EngineThread {
        EngineThread {
            shared: Arc::new(RwLock::new(Snapshot::default())),
            post: mpsc::channel().0,
            serving: Serving::Empty,
            loads: 0,
            session: None,
            batch: Batch::default(),
            pending: None,
            winding: None,
            waits: 0,
        }
    }

    /// Installs a fake model, as a completed LoadModel would, with `options`.
    fn install(engine: &mut EngineThread, model: FakeModel, options: &[&str]) {
        let request = LoadRequest {
            model: "fake".into(),
            options: options.iter().map(|o| o.to_string()).collect(),
            ..LoadRequest::default()
        };
        let config = LoadConfig::from_request(&request, &NoEnv).expect("the options parse");
        engine.install(Built {
            model: LoadedModel {
                model: Box::new(model),
                tokenizer: fake::tokenizer().clone(),
                config: serde_json::Value::Null,
                dir: std::path::PathBuf::new(),
            },
            config,
            context: 1 << 20,
            on_cluster: false,
            draft: None,
        });
    }

    /// Tokenizes at the edge, as the service does, and sends the request in.
    fn generate(engine: &mut EngineThread, text: &str, max_tokens: usize) -> Rx {
        let info = engine.shared.read().expect("readable").model.clone();
        let info = info.expect("a model is installed");
        let options = GenerateOptions {
            max_tokens,
            ignore_eos: true,
            ..GenerateOptions::default()
        };
        let request = info.request(text, options, "").expect("a valid prompt");
        let (events, rx) = tmpsc::unbounded_channel();
        engine.enqueue(request, events, None);
        rx
    }

    fn run_rounds(engine: &mut EngineThread) {
        for _ in 0..200 {
            if engine.batch.idle() {
                return;
            }
            engine.round();
        }
        panic!("the engine did not drain");
    }

    /// The tokens and the error a request got.
    fn outcome(rx: &mut Rx) -> (usize, Option<Error>) {
        let (mut tokens, mut error) = (0, None);
        while let Ok(event) = rx.try_recv() {
            match event {
                Ok(Event::Token(_)) => tokens += 1,
                Ok(Event::Done(_)) => {}
                Err(e) => error = Some(e),
            }
        }
        (tokens, error)
    }

    /// The tokens of a request that got no error.
    fn served(rx: &mut Rx) -> usize {
        let (tokens, error) = outcome(rx);
        assert!(error.is_none(), "{error:?}");
        tokens
    }

    /// Requests tokenized for a model that has since been replaced are ABORTED; the new
    /// model's serve, and the metrics count them.
    #[test]
    fn ids_of_a_replaced_model_are_aborted_and_the_new_one_serves() {
        let mut engine = engine();
        install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
        let info = engine.shared.read().expect("readable").model.clone();
        let stale = info
            .expect("installed")
            .request("Hello there", GenerateOptions::default(), "");
        install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
        let (events, mut rx) = tmpsc::unbounded_channel();
        engine.enqueue(stale.expect("valid"), events, None);
        assert!(matches!(outcome(&mut rx).1, Some(Error::Aborted(m)) if m.contains("replaced")));
        let mut fresh = generate(&mut engine, "Hello there", 4);
        run_rounds(&mut engine);
        assert_eq!(served(&mut fresh), 4);
        let snapshot = engine.shared.read().expect("readable").clone();
        assert_eq!(snapshot.metrics.tokens_generated, 4);
        assert_eq!(snapshot.state, EngineState::Ready);
    }

    /// A request whose KV memory exceeds the whole budget is RESOURCE_EXHAUSTED at once.
    #[test]
    fn a_request_larger_than_the_kv_budget_is_refused_at_admission() {
        let mut engine = engine();
        install(
            &mut engine,
            FakeModel::new(Queueing::HostIds),
            &["kv_memory_mb:1"],
        );
        // 16 bytes a position: 100,000 positions are more than 1 MiB.
        let mut rx = generate(&mut engine, "Hello", 100_000);
        let (_, error) = outcome(&mut rx);
        assert!(matches!(error, Some(Error::Overloaded(m)) if m.contains("kv_memory_mb")));
        assert!(engine.batch.idle());
    }

    /// On one node, a failed round fails its requests and a panicking one fails them with
    /// INTERNAL naming the panic; either way the model keeps serving the next request.
    #[test]
    fn a_failed_or_panicking_round_fails_its_requests_and_the_model_serves_on() {
        for trouble in [Trouble::Fail, Trouble::Panic] {
            let mut engine = engine();
            let model = FakeModel::new(Queueing::HostIds).with_trouble(trouble);
            install(&mut engine, model, &[]);
            let mut first = generate(&mut engine, "Hello", 3);
            run_rounds(&mut engine);
            let (_, error) = outcome(&mut first);
            match trouble {
                Trouble::Panic => assert!(
                    matches!(&error, Some(Error::Internal(m)) if m.contains("a step panicked")),
                    "{error:?}"
                ),
                _ => assert!(error.is_some(), "{trouble:?}"),
            }
            let mut second = generate(&mut engine, "Hello", 3);
            run_rounds(&mut engine);
            assert_eq!(served(&mut second), 3, "{trouble:?}");
        }
    }

    /// Free ends the running requests with ABORTED and forgets the model.
    #[test]
    fn free_aborts_the_running_requests_and_forgets_the_model() {
        let mut engine = engine();
        install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
        let mut rx = generate(&mut engine, "Hello", 50);
        engine.round();
        engine.free();
        assert!(matches!(outcome(&mut rx).1, Some(Error::Aborted(m)) if m.contains("freed")));
        assert!(engine.shared.read().expect("readable").model.is_none());
        let (events, mut late) = tmpsc::unbounded_channel();
        let request = GenerateRequest {
            ids: vec![1, 2],
            model: ModelSerial(1),
            options: GenerateOptions::default(),
        };
        engine.enqueue(request, events, None);
        assert!(matches!(outcome(&mut late).1, Some(Error::NotLoaded)));
    }

    /// A posted fault with no cluster under the engine (stale, or from a replaced one)
    /// changes nothing.
    #[test]
    fn a_stale_cluster_fault_changes_nothing() {
        let mut engine = engine();
        install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
        engine.on_cluster_fault();
        let mut rx = generate(&mut engine, "Hello", 2);
        run_rounds(&mut engine);
        assert_eq!(served(&mut rx), 2);
    }

    /// A load that waits for a worker runs beside serving: the fake model answers while the
    /// wait runs, and the wait ends at its next tick once its caller is gone, the model still
    /// served and Status's wait cleared.
    #[test]
    fn a_wait_for_workers_runs_beside_serving_and_ends_when_its_caller_leaves() {
        let (post, posted) = mpsc::channel();
        let mut engine = EngineThread { post, ..engine() };
        install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
        let free = || std::net::TcpListener::bind("127.0.0.1:0").map(|l| l.local_addr());
        let mut ports: Vec<std::net::SocketAddr> = (0..3)
            .map(|_| free().expect("a port").expect("an address"))
            .collect();
        let control = ports.pop().expect("three ports").port();
        let hostfile = std::env::temp_dir().join(format!("wait-{}.json", std::process::id()));
        std::fs::write(&hostfile, serde_json::json!(ports).to_string()).expect("written");
        let request = LoadRequest {
            model: "fake".into(),
            options: vec![
                format!("hostfile:{}", hostfile.display()),
                format!("control_port:{control}"),
            ],
            ..LoadRequest::default()
        };
        let config = LoadConfig::from_request(&request, &NoEnv).expect("the options parse");
        let (tx, rx) = oneshot::channel();
        engine.on_load(Box::new(config), Reply::new(tx));
        assert!(engine.pending.is_some());
        let mut answer = generate(&mut engine, "Hello", 3);
        run_rounds(&mut engine);
        assert_eq!(served(&mut answer), 3);
        drop(rx);
        let waited = posted.recv_timeout(Duration::from_secs(2));
        let _ = std::fs::remove_file(&hostfile);
        let Ok(Command::Waited(outcome)) = waited else {
            panic!("the wait did not end after its caller left");
        };
        assert!(matches!(&outcome.result, Err(Error::Aborted(m)) if m.contains("caller left")));
        engine.on_waited(*outcome);
        let snapshot = engine.shared.read().expect("readable").clone();
        assert!(snapshot.load_wait.is_none() && snapshot.model.is_some());
        assert!(snapshot
            .last_error
            .is_some_and(|e| e.contains("caller left")));
    }

    /// A panic in a command becomes an error naming it, whether its message was a literal
    /// or formatted, so the engine thread can fail that command and go on.
    #[test]
    fn guard_turns_a_panic_into_its_message() {
        let literal = guard(|| -> u8 { panic!("attempt to divide by zero") });
        assert_eq!(literal, Err("attempt to divide by zero".to_string()));
        let formatted = guard(|| -> u8 { panic!("head_dim {}", 0) });
        assert_eq!(formatted, Err("head_dim 0".to_string()));
        assert_eq!(guard(|| 7), Ok(7));
    }
}
