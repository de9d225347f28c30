//! The `Backend` service: each RPC validates, converts, and asks the engine.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert::{self, check_identity};
use super::pb;
use super::status::{bounded_status, client_text, to_status};
use crate::chat_output::{OutputFormat, OutputSplitter, Split, ToolCall};
use crate::engine::{Engine, EngineState, ModelInfo, Snapshot};
use crate::error::Error;
use crate::metrics::{Exporter, Tally};
use crate::options::{LoadConfig, LoadRequest, Settings};
use crate::request::{Event, FinishReason, GenerateRequest, Summary, TokenEvent, TokenLogprob};

/// LoadModel's answer on success, as LocalAI's own mlx-distributed backend words it.
const LOADED: &str = "Model loaded successfully";

pub struct Service<E: Engine> {
    engine: Arc<E>,
    /// What LoadModel falls back on for options it was not given.
    settings: Settings,
    /// The metrics listener (`metrics_addr`) and the requests' outcomes it reports.
    exporter: Arc<Exporter>,
}

impl<E: Engine> Service<E> {
    /// The service; it receives messages of up to 50 MiB, so the C heap is set to give
    /// large blocks back when they are freed (`memory::bound_heap`).
    pub fn new(engine: Arc<E>, settings: Settings, exporter: Arc<Exporter>) -> Service<E> {
        crate::memory::bound_heap();
        log_cpu_kernels();
        Service {
            engine,
            settings,
            exporter,
        }
    }

    /// LoadModel with its metrics listener: a `metrics_addr` that cannot be bound fails the
    /// load before anything is loaded, naming the address. Success answers LocalAI's
    /// `Model loaded successfully` (its mlx-distributed backend's words, which its tests
    /// expect); the model's path goes to the log and to Status (`model_entry`).
    async fn load_with_metrics(&self, config: LoadConfig) -> pb::Result {
        let (model, addr) = (crate::error::quote(&config.model), config.metrics.addr);
        let load = async {
            let result = outcome(
                self.engine.load(config).await,
                LOADED.into(),
                &format!("error loading model {model}"),
            );
            if result.success {
                tracing::info!(model = %model, "LoadModel: {LOADED}");
            }
            let loaded = result.success;
            (result, loaded)
        };
        match self.exporter.around_load(addr, load).await {
            Ok(result) => result,
            Err(e) => pb::Result {
                success: false,
                message: client_text(&format!("error loading model {model}: {e}")),
            },
        }
    }

    /// The model being served; a degraded engine answers UNAVAILABLE naming the lost rank.
    fn loaded(&self) -> Result<ModelInfo, Status> {
        let snapshot = self.engine.snapshot();
        match (snapshot.model, snapshot.state) {
            (Some(model), _) => Ok(model),
            (None, EngineState::Degraded) => Err(to_status(Error::RankLost(
                snapshot.last_error.unwrap_or_default(),
            ))),
            (None, _) => Err(Status::failed_precondition(
                "no model is loaded: call LoadModel first",
            )),
        }
    }

    /// Checks identity, converts and tokenizes the request (on a blocking thread, as a long
    /// prompt takes milliseconds), then compiles its grammar behind the grammar gate (so a
    /// request without one never waits behind grammars); returns the reply shaping too (the
    /// model's output format, the prompt's reasoning state, the request's tools).
    async fn prepare(
        &self,
        req: &pb::PredictOptions,
        stream: bool,
    ) -> Result<(ModelInfo, GenerateRequest, OutputSplitter), Status> {
        let model = self.loaded()?;
        check_identity(&req.model_identity, &model)?;
        convert::refuse_media(req)?;
        let tools = convert::tools(req)?;
        let prompt = convert::prompt_text(req, &model.tokenizer)?;
        let splitter = OutputSplitter::new(&OutputFormat::of(&model.tokenizer), &prompt, tools);
        let options = convert::generate_options(req, &model, stream)?;
        let info = model.clone();
        let mut request = tokio::task::spawn_blocking(move || info.request(&prompt, options, ""))
            .await
            .map_err(|e| {
                Status::internal(client_text(&format!("tokenizing the prompt failed: {e}")))
            })?
            .map_err(to_status)?;
        if !req.grammar.trim().is_empty() {
            let grammars = model.grammars.clone();
            let constraint = grammars.compile_gated(req.grammar.clone()).await;
            request.options.constraint = Some(Box::new(constraint.map_err(to_status)?));
        }
        Ok((model, request, splitter))
    }
}

impl<E: Engine> Service<E> {
    /// Predict's answer and how the request finished.
    async fn answer(
        &self,
        request: &pb::PredictOptions,
    ) -> Result<(pb::Reply, FinishReason), Status> {
        let (model, req, mut splitter) = self.prepare(request, false).await?;
        let mut events = self.engine.generate(req).map_err(to_status)?;
        let (mut split, mut logprobs) = (Split::default(), Vec::<(u32, TokenLogprob)>::new());
        while let Some(event) = events.recv().await {
            match event.map_err(to_status)? {
                Event::Token(t) => {
                    split.extend(splitter.push(&t.text));
                    logprobs.extend(t.logprob.map(|l| (t.id, l)));
                }
                Event::Done(summary) => {
                    split.extend(splitter.push(&summary.tail));
                    split.extend(splitter.finish());
                    // Around calls, the content is what the model wrote between them.
                    let content = match split.calls.is_empty() {
                        true => split.content,
                        false => split.content.trim().to_string(),
                    };
                    let reply = pb::Reply {
                        message: content.clone().into_bytes(),
                        logprobs: convert::logprobs_json(&model.tokenizer, &logprobs),
                        chat_deltas: vec![pb::ChatDelta {
                            content,
                            reasoning_content: split.reasoning,
                            tool_calls: tool_call_deltas(split.calls),
                        }],
                        ..Default::default()
                    };
                    return Ok((convert::with_summary(reply, &summary), summary.finish));
                }
            }
        }
        Err(Status::internal(
            "the engine ended the request without a result",
        ))
    }

    /// PredictStream's start: the reply shaping and the generation's events.
    async fn start_stream(
        &self,
        request: &pb::PredictOptions,
    ) -> Result<(StreamReplies, crate::engine::EventStream), Status> {
        let (model, req, splitter) = self.prepare(request, true).await?;
        let events = self.engine.generate(req).map_err(to_status)?;
        let replies = StreamReplies {
            tokenizer: model.tokenizer.clone(),
            splitter,
            logprobs: Vec::new(),
        };
        Ok((replies, events))
    }
}

/// What PredictStream has sent so far of one request, to make its next replies.
struct StreamReplies {
    tokenizer: Arc<crate::tokenizer::Tokenizer>,
    splitter: OutputSplitter,
    logprobs: Vec<(u32, TokenLogprob)>,
}

impl StreamReplies {
    /// A reply carrying `text`, split into content, reasoning and the calls it completes.
    fn delta(&mut self, text: String) -> pb::Reply {
        let split = self.splitter.push(&text);
        pb::Reply {
            message: text.into_bytes(),
            chat_deltas: chat_delta(split),
            ..Default::default()
        }
    }

    /// A token's reply; none for a token with no text yet (its logprob is kept).
    fn token(&mut self, t: TokenEvent) -> Option<pb::Reply> {
        self.logprobs.extend(t.logprob.clone().map(|l| (t.id, l)));
        (!t.text.is_empty()).then(|| self.delta(t.text))
    }

    /// The end: the held-back tail and any call still open (if it has anything), then the
    /// last reply with the logprobs and the summary.
    fn done(&mut self, summary: &Summary) -> (Option<pb::Reply>, pb::Reply) {
        let mut tail = self.delta(summary.tail.clone());
        tail.chat_deltas.extend(chat_delta(self.splitter.finish()));
        let has_tail = !tail.message.is_empty() || !tail.chat_deltas.is_empty();
        let last = pb::Reply {
            logprobs: convert::logprobs_json(&self.tokenizer, &self.logprobs),
            ..Default::default()
        };
        (
            has_tail.then_some(tail),
            convert::with_summary(last, summary),
        )
    }
}

fn chat_delta(split: Split) -> Vec<pb::ChatDelta> {
    if split.content.is_empty() && split.reasoning.is_empty() && split.calls.is_empty() {
        return Vec::new();
    }
    vec![pb::ChatDelta {
        content: split.content,
        reasoning_content: split.reasoning,
        tool_calls: tool_call_deltas(split.calls),
    }]
}

fn tool_call_deltas(calls: Vec<ToolCall>) -> Vec<pb::ToolCallDelta> {
    calls
        .into_iter()
        .map(|c| pb::ToolCallDelta {
            index: c.index as i32,
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        })
        .collect()
}

/// ModelMetadata's markers of the model's tool-call format, where its fields describe it.
fn tool_format_markers(format: &OutputFormat) -> Option<pb::ToolFormatMarkers> {
    let m = format.tools?.markers()?;
    let (reasoning_start, reasoning_end) = format.think.clone().unwrap_or_default();
    Some(pb::ToolFormatMarkers {
        format_type: m.format_type.into(),
        section_start: m.section_start.into(),
        section_end: m.section_end.into(),
        per_call_start: m.per_call_start.into(),
        per_call_end: m.per_call_end.into(),
        func_name_prefix: m.func_name_prefix.into(),
        func_name_suffix: m.func_name_suffix.into(),
        func_close: m.func_close.into(),
        arg_name_prefix: m.arg_name_prefix.into(),
        arg_name_suffix: m.arg_name_suffix.into(),
        arg_value_prefix: m.arg_value_prefix.into(),
        arg_value_suffix: m.arg_value_suffix.into(),
        name_field: m.name_field.into(),
        args_field: m.args_field.into(),
        reasoning_start,
        reasoning_end,
        ..Default::default()
    })
}

/// A LoadModel/Free answer: success, or the error with what was being done.
fn outcome(
    reply: Result<crate::error::Result<()>, tokio::sync::oneshot::error::RecvError>,
    success: String,
    doing: &str,
) -> pb::Result {
    match reply {
        Ok(Ok(())) => pb::Result {
            success: true,
            message: success,
        },
        Ok(Err(e)) => pb::Result {
            success: false,
            message: client_text(&format!("{doing}: {e}")),
        },
        Err(_) => pb::Result {
            success: false,
            message: format!("{doing}: the engine thread stopped"),
        },
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<pb::Reply, Status>> + Send>>;

/// Streams a generation's replies; `tally` counts how it ends (dropped when the client
/// leaves: cancelled).
fn stream_replies(
    mut replies: StreamReplies,
    mut events: crate::engine::EventStream,
    tally: Tally,
) -> ReplyStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::Reply, Status>>(64);
    tokio::spawn(async move {
        let mut tally = Some(tally);
        while let Some(event) = events.recv().await {
            let reply = match event {
                Err(e) => {
                    let status = to_status(e);
                    if let Some(t) = tally.take() {
                        failed(t, &status);
                    }
                    Err(status)
                }
                Ok(Event::Token(t)) => match replies.token(t) {
                    Some(reply) => Ok(reply),
                    None => continue,
                },
                Ok(Event::Done(summary)) => {
                    let (tail, last) = replies.done(&summary);
                    if let Some(tail) = tail {
                        if tx.send(Ok(tail)).await.is_err() {
                            return;
                        }
                    }
                    if let Some(t) = tally.take() {
                        t.finished(finish_label(summary.finish));
                    }
                    Ok(last)
                }
            };
            if tx.send(reply).await.is_err() {
                return; // the client left: dropping `events` cancels the generation
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// A request's outcome label for a finish reason.
fn finish_label(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Grammar => "grammar",
    }
}

/// Counts a failed request under its status code's name (`invalid_argument`, ...).
fn failed(tally: Tally, status: &Status) {
    let mut label = String::new();
    for (i, c) in format!("{:?}", status.code()).chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            label.push('_');
        }
        label.push(c.to_ascii_lowercase());
    }
    tally.failed(&label, status.message());
}

#[tonic::async_trait]
impl<E: Engine> pb::backend_server::Backend for Service<E> {
    /// "OK", or "DEGRADED: ..." (a rank was lost), "STOPPED: ..." or "FAILED: ..." (the
    /// engine thread ended), which hosts read as not healthy.
    async fn health(&self, _: Request<pb::HealthMessage>) -> Result<Response<pb::Reply>, Status> {
        let snapshot = self.engine.snapshot();
        let message = match snapshot.state {
            EngineState::Degraded => {
                format!("DEGRADED: {}", snapshot.last_error.unwrap_or_default())
            }
            EngineState::Stopped => {
                format!("STOPPED: {}", snapshot.last_error.unwrap_or_default())
            }
            // Only a panic that escaped the engine thread fails it; its text is in the log.
            EngineState::Failed => {
                "FAILED: the engine thread panicked (the panic's message is in the backend's log)"
                    .to_string()
            }
            _ => "OK".to_string(),
        };
        Ok(Response::new(pb::Reply {
            message: client_text(&message).into_bytes(),
            ..Default::default()
        }))
    }

    async fn load_model(
        &self,
        request: Request<pb::ModelOptions>,
    ) -> Result<Response<pb::Result>, Status> {
        let o = request.into_inner();
        if let Some(message) = convert::unsupported_model_field(&o) {
            return Ok(Response::new(pb::Result {
                success: false,
                message,
            }));
        }
        let req = LoadRequest {
            model: o.model,
            model_path: o.model_path,
            options: o.options,
            context_size: o.context_size,
            trust_remote_code: o.trust_remote_code,
            grammar_triggers: o.grammar_triggers.into_iter().map(|t| t.word).collect(),
            cache_type_key: o.cache_type_key,
            cache_type_value: o.cache_type_value,
            draft_model: o.draft_model,
            lora_adapter: o.lora_adapter,
            lora_scale: o.lora_scale,
            lora_adapters: o.lora_adapters,
            lora_scales: o.lora_scales,
            lora_base: o.lora_base,
        };
        let result = match LoadConfig::from_request(&req, &self.settings) {
            Err(message) => pb::Result {
                success: false,
                message: client_text(&message),
            },
            Ok(config) => self.load_with_metrics(config).await,
        };
        Ok(Response::new(result))
    }

    async fn predict(
        &self,
        request: Request<pb::PredictOptions>,
    ) -> Result<Response<pb::Reply>, Status> {
        let tally = self.exporter.outcomes().start();
        match self.answer(request.get_ref()).await {
            Ok((reply, finish)) => {
                tally.finished(finish_label(finish));
                Ok(Response::new(reply))
            }
            Err(status) => {
                let status = bounded_status(status);
                failed(tally, &status);
                Err(status)
            }
        }
    }

    type PredictStreamStream = ReplyStream;

    async fn predict_stream(
        &self,
        request: Request<pb::PredictOptions>,
    ) -> Result<Response<ReplyStream>, Status> {
        let tally = self.exporter.outcomes().start();
        match self.start_stream(request.get_ref()).await {
            Ok((replies, events)) => Ok(Response::new(stream_replies(replies, events, tally))),
            Err(status) => {
                let status = bounded_status(status);
                failed(tally, &status);
                Err(status)
            }
        }
    }

    async fn tokenize_string(
        &self,
        request: Request<pb::PredictOptions>,
    ) -> Result<Response<pb::TokenizationResponse>, Status> {
        let model = self.loaded()?;
        let req = request.get_ref();
        let ids = async {
            check_identity(&req.model_identity, &model)?;
            convert::refuse_media(req)?;
            let text = convert::prompt_text(req, &model.tokenizer)?;
            model.tokenizer.encode(&text).map_err(to_status)
        }
        .await
        .map_err(bounded_status)?;
        Ok(Response::new(pb::TokenizationResponse {
            length: ids.len() as i32,
            tokens: ids.into_iter().map(|i| i as i32).collect(),
        }))
    }

    async fn detokenize(
        &self,
        request: Request<pb::DetokenizeRequest>,
    ) -> Result<Response<pb::DetokenizeResponse>, Status> {
        let model = self.loaded()?;
        let vocab = model.tokenizer.vocab_size();
        let ids = request
            .into_inner()
            .tokens
            .into_iter()
            .map(|t| match usize::try_from(t) {
                Ok(id) if id < vocab => Ok(id as u32),
                _ => Err(Status::invalid_argument(format!(
                    "token {t} is not in the vocabulary (0..{vocab})"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let content = model.tokenizer.decode(&ids).map_err(to_status)?;
        Ok(Response::new(pb::DetokenizeResponse { content }))
    }

    async fn status(
        &self,
        _: Request<pb::HealthMessage>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        use pb::status_response::State;
        let snapshot = self.engine.snapshot();
        let state = match snapshot.state {
            EngineState::Uninitialized | EngineState::Loading => State::Uninitialized,
            EngineState::Ready => State::Ready,
            EngineState::Busy => State::Busy,
            EngineState::Error
            | EngineState::Degraded
            | EngineState::Stopped
            | EngineState::Failed => State::Error,
        };
        let memory = memory_usage(&snapshot);
        Ok(Response::new(pb::StatusResponse {
            state: state as i32,
            memory: Some(memory),
        }))
    }

    async fn free(&self, _: Request<pb::HealthMessage>) -> Result<Response<pb::Result>, Status> {
        let result = outcome(
            self.engine.free().await,
            "model freed".into(),
            "error freeing the model",
        );
        Ok(Response::new(result))
    }

    async fn get_metrics(
        &self,
        _: Request<pb::MetricsRequest>,
    ) -> Result<Response<pb::MetricsResponse>, Status> {
        let m = self.engine.snapshot().metrics;
        Ok(Response::new(pb::MetricsResponse {
            slot_id: 0,
            // The proto has no fields for them, so the counters go here as JSON.
            prompt_json_for_slot: serde_json::json!({
                "prefix_cache": m.prefix_cache,
                "kv_reserved_bytes": m.kv_reserved_bytes,
                "kv_budget_bytes": m.kv_budget_bytes,
                "queued": m.queued,
                "running": m.running,
                "throughput": m.throughput,
                "grammar": m.grammar,
                "grammar_compiles": crate::grammar::counts(),
                "speculation": m.speculation,
            })
            .to_string(),
            tokens_per_second: m.last_tokens_per_second as f32,
            tokens_generated: m.tokens_generated.min(i32::MAX as u64) as i32,
            prompt_tokens_processed: m.prompt_tokens_processed.min(i32::MAX as u64) as i32,
        }))
    }

    async fn model_metadata(
        &self,
        _: Request<pb::ModelOptions>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let model = self.loaded()?;
        let format = OutputFormat::of(&model.tokenizer);
        let tool_format = tool_format_markers(&format);
        Ok(Response::new(pb::ModelMetadataResponse {
            supports_thinking: format.think.is_some(),
            rendered_template: model
                .tokenizer
                .template_source()
                .unwrap_or_default()
                .to_string(),
            tool_format,
            media_marker: String::new(),
        }))
    }
}

/// A cluster's ranks in Status's map, which holds numbers only: `rank 1 10.0.0.2:5000` is 1
/// while rank 0 hears from it and 0 once it is lost, so Status names every rank's host.
fn rank_entries(snapshot: &crate::engine::Snapshot) -> Vec<(String, u64)> {
    use crate::distributed::board::Health;
    let ranks = snapshot
        .ranks
        .as_ref()
        .map(|b| b.ranks())
        .unwrap_or_default();
    ranks
        .into_iter()
        .map(|r| {
            let up = u64::from(r.health == Health::Up);
            (format!("rank {} {}", r.rank, r.address), up)
        })
        .collect()
}

/// The loaded model in Status's map, which holds numbers only: `model <name>` (the path or
/// name LoadModel was given), its value the weights' bytes, so Status names what it serves.
fn model_entry(snapshot: &Snapshot) -> impl Iterator<Item = (String, u64)> {
    let model = snapshot.model.as_ref();
    let bytes = model.map(|m| (format!("model {}", m.config.model), m.weights.bytes));
    // 1 for a multimodal checkpoint served as its text model alone (towers dropped).
    let text_only = model.map(|m| ("text_only".to_string(), u64::from(m.text_only)));
    bytes.into_iter().chain(text_only)
}

/// This process's resident memory, from /proc (0 where there is none).
fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .unwrap_or(0);
    pages * 4096
}

/// Says once per process which integer kernels run, and what the AMX probe found (the tile
/// step tried in a child process, so a CPU that lists AMX but faults on it costs nothing).
fn log_cpu_kernels() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use quant_cpu::kernel::{amx, int8};
        let (amx, int8) = (amx::amx(), int8::isa());
        let tiles = int8::tiles::wanted();
        tracing::info!(
            int8_kernels = int8.name(),
            int8_weights_in_tiles = tiles,
            int8_products_on_amx = tiles && amx == &amx::Amx::Usable,
            blas = %skinny_gemm::blas_kernels(),
            "{amx}"
        );
    });
}

/// Status's memory breakdown: MLX's and the process's memory, the weights (and the layers
/// that decode op by op), the KV and prefix cache, the grammar compile gate, a pending
/// load's wait, and each rank.
fn memory_usage(snapshot: &Snapshot) -> pb::MemoryUsageData {
    let mlx = mlx_rs::memory::active_memory().unwrap_or(0) as u64;
    let cache = mlx_rs::memory::cache_memory().unwrap_or(0) as u64;
    let rss = resident_bytes();
    let compiles = crate::grammar::counts();
    let (prefix, m) = (&snapshot.metrics.prefix_cache, &snapshot.metrics);
    let weights = snapshot
        .model
        .as_ref()
        .map(|i| i.weights)
        .unwrap_or_default();
    pb::MemoryUsageData {
        total: rss,
        breakdown: [
            ("mlx_active".to_string(), mlx),
            ("mlx_cache".to_string(), cache),
            ("rss".to_string(), rss),
            ("weight_bytes".to_string(), weights.bytes),
            (
                "portable_kernel_layers".to_string(),
                weights.portable_layers as u64,
            ),
            // `cpu_numerics:int8` (1) or exact (0), and the packed layers int8 leaves exact.
            ("cpu_numerics_int8".to_string(), u64::from(weights.int8)),
            (
                "int8_exact_layers".to_string(),
                weights.exact_under_int8 as u64,
            ),
            // Layers whose declared shape the one-node decode layer does not take.
            (
                "op_by_op_layers".to_string(),
                weights.op_by_op_layers as u64,
            ),
            ("kv_reserved".to_string(), m.kv_reserved_bytes as u64),
            ("prefix_cache_bytes".to_string(), prefix.bytes as u64),
            ("prefix_cache_entries".to_string(), prefix.entries as u64),
            ("prefix_cache_hits".to_string(), prefix.hits),
            ("prefix_cache_misses".to_string(), prefix.misses),
            (
                "grammar_compiles_queued".to_string(),
                compiles.queued as u64,
            ),
            (
                "grammar_compiles_running".to_string(),
                compiles.running as u64,
            ),
            // 1 while a LoadModel waits for its workers beside the model being served.
            (
                "load_waiting".to_string(),
                u64::from(snapshot.load_wait.is_some()),
            ),
        ]
        .into_iter()
        .chain(model_entry(snapshot))
        .chain(rank_entries(snapshot))
        .collect(),
    }
}
