//! Shaping model output for chat clients as mlx-lm's server does: reasoning apart from
//! content, and tool calls parsed out in the format the model's chat template teaches it.
//! One file per format, each after mlx-lm 0.32's parser of the same name
//! (`mlx_lm/tool_parsers/`); `detect.rs` picks one as mlx-lm's `_infer_tool_parser` does.

mod detect;
mod glm47;
mod harmony;
mod json_tools;
mod kimi_k2;
mod literal;
mod markers;
mod minimax_m2;
mod mistral;
mod pythonic;
mod qwen3_coder;
mod schema;
mod splitter;

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

pub use markers::Markers;
pub use splitter::{OutputSplitter, Split};

use crate::tokenizer::Tokenizer;

/// The reasoning markers and tool-call format of a model's output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputFormat {
    /// Reasoning's start and end markers.
    pub think: Option<(String, String)>,
    pub tools: Option<ToolFormat>,
}

impl OutputFormat {
    /// The format of a loaded model: the tool parser `tokenizer_config.json` names (as
    /// mlx-lm takes it), else its chat template, then its vocabulary.
    pub fn of(tokenizer: &Tokenizer) -> OutputFormat {
        let in_vocab = |token: &str| tokenizer.inner().token_to_id(token).is_some();
        let template = tokenizer.template_source();
        OutputFormat {
            think: detect::thinking(template, &in_vocab),
            tools: match tokenizer.tool_parser_type() {
                Some(name) => detect::named_format(name),
                None => detect::tool_format(template, &in_vocab),
            },
        }
    }

    /// The format from a template's source and a vocabulary lookup.
    pub fn detect(template: Option<&str>, in_vocab: &dyn Fn(&str) -> bool) -> OutputFormat {
        OutputFormat {
            think: detect::thinking(template, in_vocab),
            tools: detect::tool_format(template, in_vocab),
        }
    }
}

/// The tool-call formats parsed, named as mlx-lm names its parsers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Qwen 2.5/3, Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
    JsonTools,
    /// Qwen3-Coder, Qwen3.5: `<tool_call><function=NAME><parameter=P>V</parameter>...`.
    Qwen3Coder,
    /// GLM 4.5 and later: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...`.
    Glm47,
    /// Kimi K2: `<|tool_calls_section_begin|>` with `functions.NAME:IDX` and JSON arguments.
    KimiK2,
    /// Mistral: `[TOOL_CALLS]` then a JSON array, or `NAME[ARGS]{...}` (repeatable).
    Mistral,
    /// MiniMax M2: `<minimax:tool_call><invoke name=...><parameter name=...>`.
    MinimaxM2,
    /// LFM2 and others: `<|tool_call_start|>[name(arg=value, ...)]<|tool_call_end|>`.
    Pythonic,
    /// gpt-oss's harmony messages (`harmony.rs`), which mlx-lm does not parse: channels for
    /// reasoning and content, calls addressed `to=functions.NAME` with a JSON body.
    Harmony,
}

impl ToolFormat {
    pub const ALL: [ToolFormat; 8] = [
        ToolFormat::JsonTools,
        ToolFormat::Qwen3Coder,
        ToolFormat::Glm47,
        ToolFormat::KimiK2,
        ToolFormat::Mistral,
        ToolFormat::MinimaxM2,
        ToolFormat::Pythonic,
        ToolFormat::Harmony,
    ];

    /// mlx-lm's name for the parser.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::JsonTools => "json_tools",
            ToolFormat::Qwen3Coder => "qwen3_coder",
            ToolFormat::Glm47 => "glm47",
            ToolFormat::KimiK2 => "kimi_k2",
            ToolFormat::Mistral => "mistral",
            ToolFormat::MinimaxM2 => "minimax_m2",
            ToolFormat::Pythonic => "pythonic",
            ToolFormat::Harmony => "harmony",
        }
    }

    pub fn from_name(name: &str) -> Option<ToolFormat> {
        ToolFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The marker that opens a call (or a section of calls).
    pub fn start(self) -> &'static str {
        match self {
            ToolFormat::JsonTools | ToolFormat::Qwen3Coder | ToolFormat::Glm47 => "<tool_call>",
            ToolFormat::KimiK2 => "<|tool_calls_section_begin|>",
            ToolFormat::Mistral => "[TOOL_CALLS]",
            ToolFormat::MinimaxM2 => "<minimax:tool_call>",
            ToolFormat::Pythonic => "<|tool_call_start|>",
            ToolFormat::Harmony => "<|start|>",
        }
    }

    /// The marker that closes it; empty for Mistral, whose calls run to the end.
    pub fn end(self) -> &'static str {
        match self {
            ToolFormat::JsonTools | ToolFormat::Qwen3Coder | ToolFormat::Glm47 => "</tool_call>",
            ToolFormat::KimiK2 => "<|tool_calls_section_end|>",
            ToolFormat::Mistral => "",
            ToolFormat::MinimaxM2 => "</minimax:tool_call>",
            ToolFormat::Pythonic => "<|tool_call_end|>",
            ToolFormat::Harmony => "<|call|>",
        }
    }

    /// The calls in the text between the markers; `tools` is the request's tool list, whose
    /// schemas type the argument values of the XML formats.
    fn parse(self, body: &str, tools: Option<&Value>) -> Result<Vec<Call>, ParseError> {
        match self {
            ToolFormat::JsonTools => json_tools::parse(body),
            ToolFormat::Qwen3Coder => qwen3_coder::parse(body, tools).map(|c| vec![c]),
            ToolFormat::Glm47 => glm47::parse(body, tools).map(|c| vec![c]),
            ToolFormat::KimiK2 => kimi_k2::parse(body),
            ToolFormat::Mistral => mistral::parse(body),
            ToolFormat::MinimaxM2 => minimax_m2::parse(body, tools),
            ToolFormat::Pythonic => pythonic::parse(body),
            // Harmony output is read message by message (`OutputSplitter` hands it over).
            ToolFormat::Harmony => Err(ParseError::new("harmony calls are read by header")),
        }
    }
}

/// A parsed tool call as the client gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub index: usize,
    /// The model's own id where its format carries one (Kimi, Mistral), else a fresh one.
    pub id: String,
    pub name: String,
    /// JSON text of the arguments, written as Python's `json.dumps` writes it.
    pub arguments: String,
}

/// One call as a parser returns it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub name: String,
    pub arguments: Value,
    pub id: Option<String>,
}

impl Call {
    fn new(name: impl Into<String>, arguments: Value) -> Call {
        Call {
            name: name.into(),
            arguments,
            id: None,
        }
    }
}

/// Why a call's text is not a call (it then stays in the content).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ParseError(String);

impl ParseError {
    fn new(why: impl Into<String>) -> ParseError {
        ParseError(why.into())
    }
}

/// A compiled pattern; its source is a constant, so `None` is a bug this names.
fn pattern(re: &'static LazyLock<Option<Regex>>) -> Result<&'static Regex, ParseError> {
    re.as_ref()
        .ok_or_else(|| ParseError::new("an internal pattern failed to compile"))
}

/// A fresh id for a tool call: `call_` and 24 hex digits.
fn call_id(index: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(index);
    let a = h.finish();
    h.write_u64(a);
    format!("call_{a:016x}{:08x}", h.finish() as u32)
}

#[cfg(test)]
mod tests;
