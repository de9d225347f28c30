//! Which reasoning markers and tool-call format a model uses, from its chat template and
//! vocabulary, in the order mlx-lm 0.32's `_infer_thinking` and `_infer_tool_parser` check.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::ToolFormat;

/// mlx-lm's `_infer_tool_parser`: the parser mlx-lm would pick, by its name, every branch in
/// its order (so a template with both `<tool_call>` and `<arg_key>` is GLM's); then the
/// vocabulary fallback.
pub(crate) fn mlx_parser(
    template: Option<&str>,
    in_vocab: &dyn Fn(&str) -> bool,
) -> Option<&'static str> {
    if let Some(name) = template.and_then(from_template) {
        return Some(name);
    }
    if xtml_vocab(in_vocab) {
        return Some("kimi_k3");
    }
    (in_vocab("<|tool_call_start|>") && in_vocab("<|tool_call_end|>")).then_some("pythonic")
}

/// gpt-oss's harmony format, by its message and channel tokens (mlx-lm has no parser for it,
/// so it is checked where mlx-lm finds none).
fn harmony_vocab(in_vocab: &dyn Fn(&str) -> bool) -> bool {
    ["<|start|>", "<|channel|>", "<|message|>", "<|call|>"]
        .iter()
        .all(|t| in_vocab(t))
}

fn from_template(t: &str) -> Option<&'static str> {
    let has = |marker: &str| t.contains(marker);
    let rules: [(bool, &'static str); 12] = [
        (has("<minimax:tool_call>"), "minimax_m2"),
        (has("<|tool_call>") && has("<tool_call|>"), "gemma4"),
        (has("<start_function_call>"), "function_gemma"),
        (has("<longcat_tool_call>"), "longcat"),
        (has("<arg_key>"), "glm47"),
        (
            has("<|tool_list_start|>") || has("<|tool_call_start|>"),
            "pythonic",
        ),
        (
            has("<tool_call>\\n<function=") || has("<tool_call>\n<function="),
            "qwen3_coder",
        ),
        (has("<|tool_calls_section_begin|>"), "kimi_k2"),
        (
            has("<function name=\"") && has("<param name=\""),
            "minicpm5",
        ),
        (has("[TOOL_CALLS]"), "mistral"),
        (has("<atem:function_calls>"), "muse_spark"),
        (has("<tool_call>") && has("tool_call.name"), "json_tools"),
    ];
    rules
        .into_iter()
        .find(|(hit, _)| *hit)
        .map(|(_, name)| name)
}

/// The format mlx-lm would pick, where this backend parses it; else harmony, whose tokens
/// or template markers mlx-lm does not look for.
pub(crate) fn tool_format(
    template: Option<&str>,
    in_vocab: &dyn Fn(&str) -> bool,
) -> Option<ToolFormat> {
    match mlx_parser(template, in_vocab) {
        Some(name) => named_format(name),
        None => is_harmony(template, in_vocab).then_some(ToolFormat::Harmony),
    }
}

/// Harmony by its vocabulary, or by a template that writes its channel and message markers.
fn is_harmony(template: Option<&str>, in_vocab: &dyn Fn(&str) -> bool) -> bool {
    let written = template.is_some_and(|t| t.contains("<|channel|>") && t.contains("<|message|>"));
    written || harmony_vocab(in_vocab)
}

/// The format of mlx-lm's parser `name`. A format this backend does not parse leaves the
/// output as content, said once per name in the log.
pub(crate) fn named_format(name: &str) -> Option<ToolFormat> {
    let format = ToolFormat::from_name(name);
    if format.is_none() {
        static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
        if SAID
            .lock()
            .is_ok_and(|mut said| said.insert(name.to_string()))
        {
            tracing::warn!(
                "the model's tool calls are mlx-lm's {name} format, which this backend does \
                 not parse: they stay in the content"
            );
        }
    }
    format
}

/// mlx-lm's `_infer_thinking` (single-token markers in the vocabulary, then Gemma's channel
/// and the XTML markers); then Mistral's `[THINK]` and a `<think>` in the template, which
/// mlx-lm does not detect.
pub(crate) fn thinking(
    template: Option<&str>,
    in_vocab: &dyn Fn(&str) -> bool,
) -> Option<(String, String)> {
    let pair = |s: &str, e: &str| Some((s.to_string(), e.to_string()));
    for (start, end) in [
        ("<think>", "</think>"),
        ("<longcat_think>", "</longcat_think>"),
        ("<|think:start|>", "<|think:end|>"),
    ] {
        if in_vocab(start) && in_vocab(end) {
            return pair(start, end);
        }
    }
    if in_vocab("<|channel>") && in_vocab("<channel|>") {
        return pair("<|channel>thought", "<channel|>");
    }
    if xtml_vocab(in_vocab) {
        return pair("<|open|>think<|sep|>", "<|close|>think<|sep|>");
    }
    if is_harmony(template, in_vocab) {
        return pair("<|channel|>analysis<|message|>", "<|end|>");
    }
    let has = |marker: &str| template.is_some_and(|t| t.contains(marker));
    if has("[THINK]") && has("[/THINK]") {
        return pair("[THINK]", "[/THINK]");
    }
    has("<think>").then(|| ("<think>".to_string(), "</think>".to_string()))
}

fn xtml_vocab(in_vocab: &dyn Fn(&str) -> bool) -> bool {
    ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"]
        .iter()
        .all(|t| in_vocab(t))
}
