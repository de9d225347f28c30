//! Shaping model output for chat clients: reasoning (`<think>` tags) apart from content, and
//! tool calls (`<tool_call>{json}</tool_call>`) parsed out, as LocalAI's mlx backend does.

use serde_json::Value;

use crate::stopping::partial_suffix;

/// The tags a model's chat template uses, detected from its source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputFormat {
    pub think: Option<(String, String)>,
    pub tool_call: Option<(String, String)>,
}

impl OutputFormat {
    pub fn detect(template: Option<&str>) -> OutputFormat {
        let has = |tag: &str| template.is_some_and(|t| t.contains(tag));
        OutputFormat {
            think: has("<think>").then(|| ("<think>".into(), "</think>".into())),
            tool_call: has("<tool_call>").then(|| ("<tool_call>".into(), "</tool_call>".into())),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub index: usize,
    pub id: String,
    pub name: String,
    /// JSON text of the arguments.
    pub arguments: String,
}

/// Splits streamed text into content and reasoning deltas as tags arrive, holding back
/// text that could be the start of a tag.
#[derive(Debug)]
pub struct ReasoningSplitter {
    tags: Option<(String, String)>,
    in_reasoning: bool,
    held: String,
}

/// One delta, split.
#[derive(Debug, Default, PartialEq)]
pub struct Split {
    pub content: String,
    pub reasoning: String,
}

impl ReasoningSplitter {
    /// `prompt` is the rendered prompt: one that ends with the start tag begins inside reasoning.
    pub fn new(format: &OutputFormat, prompt: &str) -> ReasoningSplitter {
        let in_reasoning = format
            .think
            .as_ref()
            .is_some_and(|(start, _)| prompt.trim_end().ends_with(start.as_str()));
        ReasoningSplitter {
            tags: format.think.clone(),
            in_reasoning,
            held: String::new(),
        }
    }

    pub fn push(&mut self, delta: &str) -> Split {
        let mut out = Split::default();
        let Some((start, end)) = self.tags.clone() else {
            out.content = delta.to_string();
            return out;
        };
        self.held.push_str(delta);
        loop {
            let tag = if self.in_reasoning { &end } else { &start };
            let sink = if self.in_reasoning {
                &mut out.reasoning
            } else {
                &mut out.content
            };
            if let Some(at) = self.held.find(tag.as_str()) {
                sink.push_str(&self.held[..at]);
                self.held.drain(..at + tag.len());
                self.in_reasoning = !self.in_reasoning;
                continue;
            }
            let keep = partial_suffix(&self.held, tag);
            sink.push_str(&self.held[..self.held.len() - keep]);
            self.held.drain(..self.held.len() - keep);
            return out;
        }
    }

    /// Whatever is held back at the end.
    pub fn finish(&mut self) -> Split {
        let rest = std::mem::take(&mut self.held);
        match self.in_reasoning {
            true => Split {
                reasoning: rest,
                ..Default::default()
            },
            false => Split {
                content: rest,
                ..Default::default()
            },
        }
    }
}

/// Tool calls found in `content`, and the content without them.
pub fn parse_tool_calls(format: &OutputFormat, content: &str) -> (Vec<ToolCall>, String) {
    let Some((start, end)) = &format.tool_call else {
        return (Vec::new(), content.to_string());
    };
    let (mut calls, mut rest, mut tail) = (Vec::new(), String::new(), content);
    while let Some(at) = tail.find(start.as_str()) {
        rest.push_str(&tail[..at]);
        let body_start = at + start.len();
        let (body, next) = match tail[body_start..].find(end.as_str()) {
            Some(e) => (
                &tail[body_start..body_start + e],
                body_start + e + end.len(),
            ),
            None => (&tail[body_start..], tail.len()),
        };
        match serde_json::from_str::<Value>(body.trim()) {
            Ok(v) => {
                for call in match v {
                    Value::Array(items) => items,
                    other => vec![other],
                } {
                    let name = call["name"].as_str().unwrap_or_default().trim().to_string();
                    let arguments = match &call["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => "{}".into(),
                        other => other.to_string(),
                    };
                    calls.push(ToolCall {
                        index: calls.len(),
                        id: call_id(calls.len()),
                        name,
                        arguments,
                    });
                }
                rest.push(' ');
            }
            Err(e) => {
                tracing::warn!("unparsable tool call skipped: {e}");
                rest.push_str(&tail[at..next]);
            }
        }
        tail = &tail[next..];
    }
    rest.push_str(tail);
    match calls.is_empty() {
        // Text without calls is the text as generated, as the stream sent it.
        true => (calls, content.to_string()),
        false => (calls, rest.trim().to_string()),
    }
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
mod tests {
    use super::*;

    fn qwen() -> OutputFormat {
        OutputFormat::detect(Some("... <think> ... <tool_call> ..."))
    }

    #[test]
    fn reasoning_split_across_deltas() {
        let mut s = ReasoningSplitter::new(&qwen(), "<|im_start|>assistant\n");
        let mut all = Split::default();
        for d in ["<th", "ink>plan", " it</thi", "nk>\n\nAnswer", " <t"] {
            let x = s.push(d);
            all.content.push_str(&x.content);
            all.reasoning.push_str(&x.reasoning);
        }
        all.content.push_str(&s.finish().content);
        assert_eq!(all.reasoning, "plan it");
        assert_eq!(all.content, "\n\nAnswer <t");
    }

    #[test]
    fn prompt_ending_in_think_starts_in_reasoning() {
        let mut s = ReasoningSplitter::new(&qwen(), "assistant\n<think>\n");
        let x = s.push("hmm</think>ok");
        assert_eq!((x.reasoning.as_str(), x.content.as_str()), ("hmm", "ok"));
    }

    #[test]
    fn tool_calls_are_parsed_out() {
        let text = r#"Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> <tool_call>bad</tool_call>"#;
        let (calls, rest) = parse_tool_calls(&qwen(), text);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].index, calls[0].name.as_str()), (0, "get_weather"));
        assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
        assert!(calls[0].id.starts_with("call_"));
        assert_eq!(rest, "Sure.   <tool_call>bad</tool_call>");
    }

    #[test]
    fn without_tags_everything_is_content() {
        let f = OutputFormat::detect(Some("plain"));
        let mut s = ReasoningSplitter::new(&f, "");
        assert_eq!(s.push("<think>x").content, "<think>x");
        assert_eq!(parse_tool_calls(&f, "<tool_call>{}</tool_call>").0, vec![]);
    }
}
