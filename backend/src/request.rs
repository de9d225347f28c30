//! Our own request and result types: no protobuf type goes past the gRPC layer.

use crate::sampling::SamplingParams;
use crate::tokenizer::TemplateInput;

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

#[derive(Debug, Clone)]
pub enum PromptInput {
    /// Raw text, tokenized as it is.
    Text(String),
    /// Messages rendered through the model's chat template.
    Chat(TemplateInput),
}

#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt: PromptInput,
    pub options: GenerateOptions,
}

/// What a generation streams back; the last event is `Done`.
#[derive(Debug, Clone)]
pub enum Event {
    Token(TokenEvent),
    Done(Summary),
}
