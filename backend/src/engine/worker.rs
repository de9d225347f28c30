//! The engine thread: owns the loaded model, runs commands one at a time in arrival order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::{mpsc, Arc, RwLock};

use tokio::sync::oneshot;

use std::time::{Duration, Instant};

use super::batch::{kv_reservation, Batch, BatchLimits, Events, InFlight, Waiting};
use super::cluster_load;
use super::sharded::Session;
use super::shared::{EngineState, ModelInfo, Snapshot};
use crate::distributed::clear_groups;
use crate::distributed::leader::Cluster;
use crate::distributed::protocol::{ToLeader, ToWorker};
use crate::error::{Error, Result};
use crate::loader::{self, LoadedModel};
use crate::options::LoadConfig;
use crate::request::{GenerateOptions, GenerateRequest, PromptInput, Summary};
use crate::source;

pub enum Command {
    Load {
        config: LoadConfig,
        reply: oneshot::Sender<Result<()>>,
    },
    Generate {
        request: GenerateRequest,
        events: Events,
        /// Counts the request against the queue bound until it is answered.
        in_flight: Option<InFlight>,
    },
    Free {
        reply: oneshot::Sender<Result<()>>,
    },
    /// Fail every request, drop the model, wait for MLX, and end the thread.
    Shutdown,
}

/// The model the engine holds, with the config it was loaded with.
struct Loaded {
    model: LoadedModel,
    config: LoadConfig,
    context: usize,
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
pub fn run_guarded(commands: mpsc::Receiver<Command>, shared: Arc<RwLock<Snapshot>>) {
    let publish_to = shared.clone();
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(commands, shared))) {
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

fn run(commands: mpsc::Receiver<Command>, shared: Arc<RwLock<Snapshot>>) {
    let mut engine = EngineThread {
        shared,
        serving: Serving::Empty,
        session: None,
        batch: Batch::default(),
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
            None if engine.batch.idle() => break, // the handle is gone
            None => engine.round(),
            Some(Command::Load { config, reply }) => {
                let _ = reply.send(engine.load(config));
            }
            Some(Command::Generate {
                request,
                events,
                in_flight,
            }) => engine.enqueue(request, events, in_flight),
            Some(Command::Free { reply }) => {
                engine.free();
                let _ = reply.send(Ok(()));
            }
            Some(Command::Shutdown) => break,
        }
    }
    engine.finish();
}

/// The engine thread's state: what it serves, the cluster, and the requests.
struct EngineThread {
    shared: Arc<RwLock<Snapshot>>,
    serving: Serving,
    /// The cluster, kept across loads while no rank is lost; a model may be served on it or not.
    session: Option<Rc<Session>>,
    batch: Batch,
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
    }

    fn count(&self, done: &[Summary]) {
        let (cache, reserved) = (self.batch.cache_stats(), self.batch.reserved());
        self.publish(|s| {
            s.metrics.prefix_cache = cache;
            s.metrics.kv_reserved_bytes = reserved;
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
        let msg = format!("{lost}; LoadModel again to form the cluster anew");
        self.batch.fail_all(&Error::RankLost(msg.clone()));
        self.serving = Serving::Degraded(msg.clone());
        self.session = None;
        clear_groups();
        release_memory();
        self.publish(|s| {
            s.state = EngineState::Degraded;
            s.model = None;
            s.last_error = Some(msg);
        });
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
            release_memory();
            self.publish(|s| {
                *s = Snapshot {
                    state: EngineState::Error,
                    last_error: Some(format!("{msg}; the model was dropped: LoadModel again")),
                    ..Snapshot::default()
                }
            });
        }
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
        match guard(|| prepare(l, request)) {
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
    fn load(&mut self, config: LoadConfig) -> Result<()> {
        self.publish(|s| {
            s.state = EngineState::Loading;
            s.last_error = None;
        });
        let outcome = match guard(|| self.build(&config)) {
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
        release_memory();
        result
    }

    /// Loads `config`'s model, leaving the one being served in place (unless the load needs
    /// another cluster: MLX holds one group at a time, so that one goes first).
    fn build(&mut self, config: &LoadConfig) -> Result<Built> {
        let hostfile = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1);
        let model = match &hostfile {
            Some(h) => {
                if self.serving.on_cluster() && !cluster_load::reusable(self.session.as_ref(), h) {
                    self.unload(&Error::Aborted(
                        "the model was replaced by LoadModel over another cluster".into(),
                    ));
                }
                cluster_load::load(config, h, &mut self.session)?
            }
            None => {
                let dir = source::resolve_with(&config.model, &source::Lookup::of(config))?;
                self.check_room(&dir, config)?;
                loader::load(&dir, config.weight_mode)?
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
        if let Some(s) = self.session.as_ref().filter(|_| built.on_cluster) {
            let shared = self.shared.clone();
            s.cluster.fault().observe(Box::new(move |msg| {
                if let Ok(mut s) = shared.write() {
                    s.state = EngineState::Degraded;
                    s.last_error = Some(msg.to_string());
                }
            }));
        }
        let info = ModelInfo {
            config: built.config.clone(),
            tokenizer: built.model.tokenizer.clone(),
            context: built.context,
            weights: built.model.model.weight_stats(),
        };
        self.publish(|s| {
            *s = Snapshot {
                state: EngineState::Ready,
                model: Some(info),
                ..Snapshot::default()
            }
        });
        self.batch = Batch::new(built.config.max_cache_entries);
        self.serving = Serving::Model(Box::new(Loaded {
            model: built.model,
            config: built.config,
            context: built.context,
            kv_budget,
            on_cluster: built.on_cluster,
        }));
    }

    /// Ends the requests with `why` and drops the model being served.
    fn unload(&mut self, why: &Error) {
        self.fail_all(why);
        self.serving = Serving::Empty;
        release_memory();
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
        let EngineThread {
            shared,
            serving,
            session,
            batch,
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

/// A model loaded beside the one being served, not yet installed.
struct Built {
    model: LoadedModel,
    config: LoadConfig,
    context: usize,
    /// Whether it was loaded over the engine's cluster.
    on_cluster: bool,
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
    cluster.fault().set_busy(true);
    cluster.fault().on_fault(Box::new(move |msg| {
        std::thread::spawn(move || {
            for tx in running {
                let _ = tx.send(Err(Error::RankLost(msg.clone())));
            }
        });
    }));
    let _watching = Watching(cluster);
    f()
}

/// Ends `watched`'s watch even when `f` panics, so the wedged-rank watchdog is not armed by
/// a step that is no longer running.
struct Watching<'a>(&'a Cluster);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.fault().clear_listener();
        self.0.fault().set_busy(false);
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

/// Tokenizes and checks a request against the context; the options get the model's limits.
fn prepare(l: &Loaded, request: GenerateRequest) -> Result<(Vec<u32>, GenerateOptions)> {
    let tok = &l.model.tokenizer;
    let text = match &request.prompt {
        PromptInput::Text(text) => text.clone(),
        PromptInput::Chat(input) => tok.apply_chat_template(input)?,
    };
    let ids = tok.encode(&text)?;
    if ids.is_empty() {
        return Err(Error::InvalidRequest("the prompt is empty".into()));
    }
    if ids.len() >= l.context {
        return Err(Error::InvalidRequest(format!(
            "the prompt has {} tokens, but the context is {} tokens",
            ids.len(),
            l.context
        )));
    }
    let mut options = request.options;
    options.max_tokens = options.max_tokens.min(l.context - ids.len());
    options.prefill_step = l.config.prefill_step;
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

fn release_memory() {
    if let Err(e) = mlx_rs::memory::clear_cache() {
        tracing::warn!("clearing MLX's cache failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
