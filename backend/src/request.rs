//! Our own request and result types: no protobuf type goes past the gRPC layer.

use tokio::sync::mpsc;

use crate::error::Result;
use crate::grammar::Constraint;
use crate::sampling::SamplingParams;
use crate::speculative::Drafting;

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Report each token's log-probability, with this many top alternatives.
    pub logprobs: Option<usize>,
    /// Prompt tokens per prefill forward pass.
    pub prefill_step: usize,
    /// The request's grammar, compiled at the edge (`PredictOptions.Grammar`).
    pub constraint: Option<Box<Constraint>>,
    /// Where speculative proposals come from (the model's `speculative` option).
    pub drafting: Drafting,
    /// Proposals per step (`PredictOptions.NDraft`, or the model's `num_draft_tokens`).
    pub draft_tokens: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prefill_step: 2048,
            constraint: None,
            drafting: Drafting::Off,
            draft_tokens: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An eos token or a stop string.
    Stop,
    /// max_tokens reached.
    Length,
    /// The caller stopped listening.
    Cancelled,
    /// The request's grammar allowed no token (or rejected the output after a trigger word).
    Grammar,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// The most likely tokens at this position, best first.
    pub top: Vec<(u32, f32)>,
}

/// One generated token and the text it completes (possibly empty, held back or cut by a stop).
#[derive(Debug, Clone)]
pub struct TokenEvent {
    pub id: u32,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Time to the first token, the last prompt token's step included (as mlx-lm counts it).
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub finish: FinishReason,
    /// Text held back at the end (an incomplete character or a partial stop string).
    pub tail: String,
}

/// Which LoadModel a request was tokenized for: token ids mean nothing to another model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSerial(pub u64);

/// A request as the engine receives it: validated and tokenized at the edge, so a long
/// prompt never stalls the rows the engine thread is running.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub ids: Vec<u32>,
    pub model: ModelSerial,
    /// Limited to the model's context and prefill step.
    pub options: GenerateOptions,
}

/// Where a generation's events go. Unbounded: a slow client must never stall the other rows
/// of the batch (a request sends at most max_tokens + 1 events).
pub type Events = mpsc::UnboundedSender<Result<Event>>;

/// What a generation streams back; the last event is `Done`.
#[derive(Debug, Clone)]
pub enum Event {
    Token(TokenEvent),
    Done(Summary),
}
