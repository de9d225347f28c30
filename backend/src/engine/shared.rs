//! State the engine thread publishes for readers that must not wait behind a generation
//! (Health, Status, metrics, tokenizing).

use std::sync::Arc;

use crate::distributed::{Fault, RankBoard};
use crate::error::{Error, Result};
use crate::grammar::Grammars;
use crate::options::LoadConfig;
use crate::prefix_cache::CacheStats;
use crate::request::{GenerateOptions, GenerateRequest, ModelSerial};
use crate::speculative::Drafting;
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineState {
    /// No model loaded.
    Uninitialized,
    Loading,
    /// A model is loaded and idle.
    Ready,
    /// A model is loaded and generating.
    Busy,
    /// The last load failed.
    Error,
    /// A rank was lost; `last_error` names it. LoadModel forms the cluster again.
    Degraded,
    /// The engine thread has ended (the process is stopping); `last_error` says why.
    Stopped,
    /// The engine thread ended on a panic it could not recover from; `last_error` names it.
    /// Only a restart helps, so Health says so.
    Failed,
}

/// The loaded model, as far as the gRPC layer needs to know it.
#[derive(Clone)]
pub struct ModelInfo {
    /// Which LoadModel this is; requests carry it so that ids never reach another model.
    pub serial: ModelSerial,
    pub config: LoadConfig,
    pub tokenizer: Arc<Tokenizer>,
    /// The longest prompt plus generation the model accepts.
    pub context: usize,
    /// The parameters rank 0 holds.
    pub weights: crate::models::common::WeightStats,
    /// Compiles requests' grammars for this model's tokenizer.
    pub grammars: Arc<Grammars>,
    /// A multimodal checkpoint whose towers were dropped: only its text model serves.
    pub text_only: bool,
}

impl ModelInfo {
    /// Validates and tokenizes a prompt for this model (the edge's half of a request; the
    /// engine thread adds the KV check, which needs the model): the prompt must be non-empty
    /// and leave room in the context, `max_tokens` is cut to the room left; a `grammar`
    /// (GBNF, empty for none) is compiled here, on a grammar thread of its own, without
    /// the gate: the gRPC layer passes none and compiles through `Grammars::compile_gated`.
    pub fn request(
        &self,
        text: &str,
        mut options: GenerateOptions,
        grammar: &str,
    ) -> Result<GenerateRequest> {
        if !grammar.trim().is_empty() {
            options.constraint = Some(Box::new(self.grammars.compile(grammar)?));
        }
        let ids = self.tokenizer.encode(text)?;
        if ids.is_empty() {
            return Err(Error::InvalidRequest("the prompt is empty".into()));
        }
        if ids.len() >= self.context {
            return Err(Error::InvalidRequest(format!(
                "the prompt has {} tokens, but the context is {} tokens",
                ids.len(),
                self.context
            )));
        }
        options.max_tokens = options.max_tokens.min(self.context - ids.len());
        options.prefill_step = self.config.limits.prefill_step;
        self.speculation(&mut options)?;
        Ok(GenerateRequest {
            ids,
            model: self.serial,
            options,
        })
    }
}

impl ModelInfo {
    /// The model's drafting, with the request's proposals per step (`NDraft`, 0: the model's
    /// `num_draft_tokens`); proposals asked of a model that cannot make them are an error.
    fn speculation(&self, options: &mut GenerateOptions) -> Result<()> {
        options.drafting = self.config.spec.drafting;
        if options.drafting == Drafting::Off {
            return match options.draft_tokens {
                0 => Ok(()),
                n => Err(Error::InvalidRequest(format!(
                    "NDraft is {n}, but the model drafts no tokens: load it with a DraftModel \
                     or the option `speculative:ngram`"
                ))),
            };
        }
        if options.draft_tokens == 0 {
            options.draft_tokens = self.config.spec.draft_tokens;
        }
        Ok(())
    }
}

/// Counters since the model was loaded.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub requests: u64,
    pub prompt_tokens_processed: u64,
    pub tokens_generated: u64,
    /// Decode speed of the last request.
    pub last_tokens_per_second: f64,
    pub prefix_cache: CacheStats,
    /// KV bytes held for the requests running now.
    pub kv_reserved_bytes: usize,
    /// KV bytes the running requests and the prefix cache may hold together.
    pub kv_budget_bytes: usize,
    /// Requests waiting for a batch row, and rows running, after the last round.
    pub queued: usize,
    pub running: usize,
    /// Tokens prefilled and generated, counted step by step.
    pub throughput: super::batch::Throughput,
    /// What grammars cost the steps they constrained.
    pub grammar: super::batch::GrammarTime,
    /// Proposals verified and taken.
    pub speculation: super::batch::Speculation,
}

#[derive(Clone)]
pub struct Snapshot {
    pub state: EngineState,
    pub model: Option<ModelInfo>,
    pub metrics: Metrics,
    pub last_error: Option<String>,
    /// The fault latch of the cluster the model is served on: a fault shows at once (see
    /// `settled`), before the engine thread has taken its `ClusterFault` command.
    pub cluster_fault: Option<Arc<Fault>>,
    /// Each rank's part, health and step times, while the model is on a cluster (kept when a
    /// rank is lost, so the loss shows).
    pub ranks: Option<Arc<RankBoard>>,
    /// The model a LoadModel is waiting for workers or peers for, while it waits (serving
    /// goes on meanwhile): Status shows it as `load_waiting`.
    pub load_wait: Option<String>,
}

impl Snapshot {
    /// The snapshot as readers see it: degraded as soon as the model's cluster has a fault.
    pub fn settled(mut self) -> Snapshot {
        let lost = self.cluster_fault.as_ref().and_then(|f| f.get());
        if let (Some(lost), false) = (lost, self.state == EngineState::Degraded) {
            self.state = EngineState::Degraded;
            self.model = None;
            self.last_error = Some(degraded_message(&lost));
        }
        self
    }
}

/// What requests and Status say once a rank under the model is lost.
pub fn degraded_message(lost: &str) -> String {
    format!("{lost}; LoadModel again to form the cluster anew")
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            state: EngineState::Uninitialized,
            model: None,
            metrics: Metrics::default(),
            last_error: None,
            cluster_fault: None,
            ranks: None,
            load_wait: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{LoadRequest, NoEnv};

    fn model(context: usize) -> ModelInfo {
        let request = LoadRequest {
            model: "m".into(),
            ..LoadRequest::default()
        };
        let config = LoadConfig::from_request(&request, &NoEnv).expect("a bare config parses");
        ModelInfo {
            serial: ModelSerial(3),
            tokenizer: crate::engine::fake::tokenizer().clone(),
            context,
            weights: Default::default(),
            grammars: Arc::new(Grammars::new(std::path::Path::new(""), 0, &[], &[])),
            text_only: false,
            config,
        }
    }

    /// The edge tokenizes for the model it names, cuts max_tokens to the room left and
    /// takes the model's prefill step, so the engine thread only admits.
    #[test]
    fn a_request_is_tokenized_and_limited_at_the_edge() -> Result<()> {
        let info = model(64);
        let options = GenerateOptions {
            max_tokens: 1000,
            prefill_step: 7,
            ..GenerateOptions::default()
        };
        let request = info.request("The capital of France is", options, "")?;
        assert_eq!(request.model, ModelSerial(3));
        assert_eq!(
            request.ids,
            info.tokenizer.encode("The capital of France is")?
        );
        assert_eq!(request.options.max_tokens, 64 - request.ids.len());
        assert_eq!(
            request.options.prefill_step,
            info.config.limits.prefill_step
        );
        Ok(())
    }

    /// An empty prompt, or one that fills the context, is INVALID_ARGUMENT naming why.
    #[test]
    fn empty_and_overlong_prompts_are_refused_at_the_edge() {
        let info = model(4);
        let empty = info.request("", GenerateOptions::default(), "");
        assert!(matches!(&empty, Err(Error::InvalidRequest(m)) if m.contains("empty")));
        let long = info.request(
            "one two three four five six",
            GenerateOptions::default(),
            "",
        );
        assert!(
            matches!(&long, Err(Error::InvalidRequest(m)) if m.contains("context is 4 tokens"))
        );
    }
}
