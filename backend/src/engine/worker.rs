//! The engine thread: owns the loaded model, runs commands one at a time in arrival order.

use std::sync::{mpsc, Arc, RwLock};

use tokio::sync::{mpsc as tmpsc, oneshot};

use super::request::{Event, GenerateRequest, PromptInput};
use super::shared::{EngineState, ModelInfo, Snapshot};
use crate::error::{Error, Result};
use crate::generate::generate;
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
        events: tmpsc::Sender<Result<Event>>,
    },
    Free {
        reply: oneshot::Sender<Result<()>>,
    },
}

/// The model the engine holds, with the config it was loaded with.
struct Loaded {
    model: LoadedModel,
    config: LoadConfig,
    context: usize,
}

pub fn run(commands: mpsc::Receiver<Command>, shared: Arc<RwLock<Snapshot>>) {
    let publish = |f: &dyn Fn(&mut Snapshot)| {
        if let Ok(mut s) = shared.write() {
            f(&mut s);
        }
    };
    let mut loaded: Option<Loaded> = None;
    while let Ok(command) = commands.recv() {
        match command {
            Command::Load { config, reply } => {
                loaded = None;
                publish(&|s| {
                    *s = Snapshot {
                        state: EngineState::Loading,
                        ..Snapshot::default()
                    }
                });
                match load(&config) {
                    Ok(l) => {
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
            Command::Generate { request, events } => {
                let Some(l) = &loaded else {
                    let _ = events.blocking_send(Err(Error::NotLoaded));
                    continue;
                };
                if events.is_closed() {
                    continue; // the client left while the request was queued
                }
                publish(&|s| s.state = EngineState::Busy);
                let outcome = run_generation(l, request, &events);
                publish(&|s| {
                    s.state = EngineState::Ready;
                    if let Ok(summary) = &outcome {
                        let m = &mut s.metrics;
                        m.requests += 1;
                        m.prompt_tokens_processed += summary.prompt_tokens as u64;
                        m.tokens_generated += summary.generated_tokens as u64;
                        m.last_tokens_per_second =
                            summary.generated_tokens as f64 / summary.decode_secs.max(1e-9);
                    }
                });
                match outcome {
                    Ok(summary) => {
                        let _ = events.blocking_send(Ok(Event::Done(summary)));
                    }
                    Err(e) => {
                        let _ = events.blocking_send(Err(e));
                    }
                }
            }
            Command::Free { reply } => {
                loaded = None;
                release_memory();
                publish(&|s| *s = Snapshot::default());
                let _ = reply.send(Ok(()));
            }
        }
    }
}

fn load(config: &LoadConfig) -> Result<Loaded> {
    let dir = source::resolve(&config.model, config.model_path.as_deref())?;
    let model = loader::load(&dir, config.weight_mode)?;
    let model_context = model.config["max_position_embeddings"]
        .as_u64()
        .map(|n| n as usize);
    let context = [config.context_size, config.max_kv_size, model_context]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(4096);
    Ok(Loaded {
        model,
        config: config.clone(),
        context,
    })
}

fn run_generation(
    l: &Loaded,
    request: GenerateRequest,
    events: &tmpsc::Sender<Result<Event>>,
) -> Result<crate::generate::Summary> {
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
    generate(l.model.model.as_ref(), tok, &ids, &options, |event| {
        events.blocking_send(Ok(Event::Token(event))).is_ok()
    })
}

fn release_memory() {
    if let Err(e) = mlx_rs::memory::clear_cache() {
        tracing::warn!("clearing MLX's cache failed: {e}");
    }
}
