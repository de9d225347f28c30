//! Our own request and event types: no protobuf type goes past the gRPC layer.

use crate::generate::{GenerateOptions, Summary, TokenEvent};
use crate::tokenizer::TemplateInput;

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
