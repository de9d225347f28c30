//! The engine thread: owns the loaded model, runs commands one at a time in arrival order.

use std::rc::Rc;
use std::sync::{mpsc, Arc, RwLock};

use tokio::sync::oneshot;

use std::time::{Duration, Instant};

use super::batch::{kv_reservation, Batch, BatchLimits, Events, InFlight, Waiting};
use super::cluster_load;
use super::request::{GenerateRequest, PromptInput};
use super::sharded::Session;
use super::shared::{EngineState, ModelInfo, Snapshot};
use crate::distributed::clear_groups;
use crate::distributed::leader::Cluster;
use crate::distributed::protocol::{ToLeader, ToWorker};
use crate::error::{Error, Result};
use crate::generate::GenerateOptions;
use crate::loader::{self, LoadedModel};
use crate::options::LoadConfig;
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
    /// The cluster it is spread over, if any.
    session: Option<Rc<Session>>,
}

/// How long the engine thread waits for its MLX stream before it ends.
const STREAM_LIMIT: Duration = Duration::from_secs(2);

pub fn run(commands: mpsc::Receiver<Command>, shared: Arc<RwLock<Snapshot>>) {
    let publish = |f: &dyn Fn(&mut Snapshot)| {
        if let Ok(mut s) = shared.write() {
            f(&mut s);
        }
    };
    let mut loaded: Option<Loaded> = None;
    let mut session: Option<Rc<Session>> = None;
    // Set when a rank was lost: requests fail with it until LoadModel forms the cluster again.
    let mut degraded: Option<String> = None;
    let mut batch = Batch::default();
    loop {
        // Between rounds, take every command that came; block only when there is no work.
        let command = match batch.idle() {
            true => commands.recv().ok(),
            false => match commands.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => break,
            },
        };
        let Some(command) = command else {
            if batch.idle() {
                break; // the handle is gone
            }
            let Some(l) = &loaded else {
                batch.fail_all(None, &Error::NotLoaded);
                continue;
            };
            publish(&|s| s.state = EngineState::Busy);
            let limits = BatchLimits {
                max_batch: l.config.max_batch,
                queue_timeout: Duration::from_secs(l.config.queue_timeout_secs),
                kv_budget: l.kv_budget,
                prefill_budget: l.config.prefill_step,
            };
            let (model, tok) = (l.model.model.as_ref(), &l.model.tokenizer);
            let outcome = match &l.session {
                Some(s) => watched(&s.cluster, batch.senders(), || {
                    batch.round(model, tok, &limits)
                }),
                None => batch.round(model, tok, &limits),
            };
            let lost = l.session.as_ref().and_then(|s| s.cluster.fault().get());
            if let Some(msg) = lost {
                // The group is broken: forget it, and say so until the next LoadModel.
                let msg = format!("{msg}; LoadModel again to form the cluster anew");
                batch.fail_all(None, &Error::RankLost(msg.clone()));
                loaded = None;
                session = None;
                clear_groups();
                release_memory();
                degraded = Some(msg.clone());
                publish(&|s| {
                    s.state = EngineState::Degraded;
                    s.model = None;
                    s.last_error = Some(msg.clone());
                });
                continue;
            }
            let (cache, reserved) = (batch.cache_stats(), batch.reserved());
            match outcome {
                Ok(done) => publish(&|s| {
                    s.metrics.prefix_cache = cache.clone();
                    s.metrics.kv_reserved_bytes = reserved;
                    for summary in &done {
                        let m = &mut s.metrics;
                        m.requests += 1;
                        m.prompt_tokens_processed += summary.prompt_tokens as u64;
                        m.tokens_generated += summary.generated_tokens as u64;
                        m.last_tokens_per_second =
                            summary.generated_tokens as f64 / summary.decode_secs.max(1e-9);
                    }
                }),
                Err(e) => batch.fail_all(Some(model), &e),
            }
            if batch.idle() {
                publish(&|s| s.state = EngineState::Ready);
            }
            continue;
        };
        match command {
            Command::Load { config, reply } => {
                batch.fail_all(
                    loaded.as_ref().map(|l| l.model.model.as_ref()),
                    &Error::Internal("another model is being loaded".into()),
                );
                loaded = None;
                degraded = None;
                publish(&|s| {
                    *s = Snapshot {
                        state: EngineState::Loading,
                        ..Snapshot::default()
                    }
                });
                let outcome = load(&config, &mut session);
                if let Err(Error::RankLost(_)) = &outcome {
                    session = None;
                    clear_groups();
                }
                match outcome {
                    Ok(l) => {
                        if let Some(s) = &l.session {
                            let shared = shared.clone();
                            s.cluster.fault().observe(Box::new(move |msg| {
                                if let Ok(mut s) = shared.write() {
                                    s.state = EngineState::Degraded;
                                    s.last_error = Some(msg.to_string());
                                }
                            }));
                        }
                        let info = ModelInfo {
                            config: l.config.clone(),
                            tokenizer: l.model.tokenizer.clone(),
                            context: l.context,
                        };
                        publish(&|s| {
                            *s = Snapshot {
                                state: EngineState::Ready,
                                model: Some(info.clone()),
                                ..Snapshot::default()
                            }
                        });
                        batch = Batch::new(l.config.max_cache_entries);
                        loaded = Some(l);
                        let _ = reply.send(Ok(()));
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        publish(&|s| {
                            *s = Snapshot {
                                state: EngineState::Error,
                                last_error: Some(msg.clone()),
                                ..Snapshot::default()
                            }
                        });
                        let _ = reply.send(Err(e));
                    }
                }
                release_memory();
            }
            Command::Generate {
                request,
                events,
                in_flight,
            } => {
                if let Some(msg) = &degraded {
                    let _ = events.send(Err(Error::RankLost(msg.clone())));
                    continue;
                }
                let Some(l) = &loaded else {
                    let _ = events.send(Err(Error::NotLoaded));
                    continue;
                };
                if events.is_closed() {
                    continue; // the client left while the request was queued
                }
                match prepare(l, request) {
                    Ok((ids, options)) => batch.enqueue(Waiting {
                        ids,
                        options,
                        events,
                        since: Instant::now(),
                        _in_flight: in_flight,
                    }),
                    Err(e) => {
                        let _ = events.send(Err(e));
                    }
                }
            }
            Command::Free { reply } => {
                batch.fail_all(
                    loaded.as_ref().map(|l| l.model.model.as_ref()),
                    &Error::Internal("the model was freed".into()),
                );
                if let Some(s) = loaded.as_ref().and_then(|l| l.session.clone()) {
                    if let Err(e) = free_workers(&s) {
                        tracing::warn!("workers did not confirm Free: {e}");
                    }
                }
                loaded = None;
                release_memory();
                publish(&|s| *s = Snapshot::default());
                let _ = reply.send(Ok(()));
            }
            Command::Shutdown => {
                batch.fail_all(
                    loaded.as_ref().map(|l| l.model.model.as_ref()),
                    &Error::ShuttingDown,
                );
                break;
            }
        }
    }
    // The model, the batch and the cluster go first; then this thread's MLX stream must
    // finish what they queued before the thread (and its MLX thread-locals) ends.
    drop((batch, loaded, session));
    publish(&|s| {
        *s = Snapshot {
            state: EngineState::Stopped,
            last_error: Some(Error::ShuttingDown.to_string()),
            ..Snapshot::default()
        }
    });
    if let Err(e) = crate::lifecycle::synchronize_streams(STREAM_LIMIT) {
        tracing::error!("the engine thread ends with MLX work in flight: {e}");
    }
}

fn load(config: &LoadConfig, session: &mut Option<Rc<Session>>) -> Result<Loaded> {
    let hostfile = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1);
    let model = match &hostfile {
        Some(h) => cluster_load::load(config, h, session)?,
        None => {
            let dir = source::resolve(&config.model, config.model_path.as_deref())?;
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
    let kv_budget = match config.kv_memory_mb {
        Some(mb) => mb << 20,
        // Half of what is free once the weights are in: the rest is for MLX's own buffers.
        None => match crate::distributed::free_memory() {
            0 => usize::MAX,
            free => (free / 2) as usize,
        },
    };
    tracing::info!(kv_budget_mb = kv_budget >> 20, "KV memory budget");
    Ok(Loaded {
        model,
        config: config.clone(),
        context,
        kv_budget,
        session: hostfile.and(session.clone()),
    })
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
    let out = f();
    cluster.fault().clear_listener();
    cluster.fault().set_busy(false);
    out
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
