//! Streamed output split into content, reasoning and tool calls as it arrives: mlx-lm's text
//! state machine (content, reasoning, tool), holding back text that could be the start of
//! a marker so no markup reaches the content.

use serde_json::Value;

use super::harmony::{Harmony, Parts};
use super::literal::dumps;
use super::{call_id, Call, OutputFormat, ToolCall, ToolFormat};
use crate::stopping::partial_suffix;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Content,
    Reasoning,
    /// Inside a tool call's markers.
    Call,
}

/// One request's output shaping.
#[derive(Debug)]
pub struct OutputSplitter {
    think: Option<(String, String)>,
    format: Option<ToolFormat>,
    /// The request's tool list, whose schemas type argument values.
    tools: Option<Value>,
    state: State,
    /// Text not yet placed: it could still be the start of a marker.
    held: String,
    /// The current call's text between its markers.
    call: String,
    calls: usize,
    /// gpt-oss's harmony messages, read by their headers instead of the states above.
    harmony: Option<Harmony>,
}

/// One delta, split; calls appear in the delta that completes them.
#[derive(Debug, Default, PartialEq)]
pub struct Split {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
}

impl Split {
    /// Appends `other` to this one.
    pub fn extend(&mut self, other: Split) {
        self.content.push_str(&other.content);
        self.reasoning.push_str(&other.reasoning);
        self.calls.extend(other.calls);
    }
}

impl OutputSplitter {
    /// `prompt` is the rendered prompt: as mlx-lm decides, the output starts inside
    /// reasoning when the prompt's last start marker comes after its last end marker.
    pub fn new(format: &OutputFormat, prompt: &str, tools: Option<Value>) -> OutputSplitter {
        let inside = format
            .think
            .as_ref()
            .is_some_and(|(start, end)| prompt.rfind(start.as_str()) > prompt.rfind(end.as_str()));
        OutputSplitter {
            think: format.think.clone(),
            format: format.tools,
            tools,
            state: if inside {
                State::Reasoning
            } else {
                State::Content
            },
            held: String::new(),
            call: String::new(),
            calls: 0,
            harmony: (format.tools == Some(ToolFormat::Harmony)).then(|| Harmony::new(prompt)),
        }
    }

    /// The markers that leave the current state, and where each leads.
    fn exits(&self) -> Vec<(String, State)> {
        let mut exits = Vec::new();
        let think = self.think.as_ref();
        match self.state {
            State::Content => exits.extend(think.map(|(s, _)| (s.clone(), State::Reasoning))),
            State::Reasoning => exits.extend(think.map(|(_, e)| (e.clone(), State::Content))),
            State::Call => exits.extend(self.format.map(|f| (f.end().to_string(), State::Content))),
        }
        if self.state != State::Call {
            exits.extend(self.format.map(|f| (f.start().to_string(), State::Call)));
        }
        exits.retain(|(marker, _)| !marker.is_empty());
        exits
    }

    pub fn push(&mut self, delta: &str) -> Split {
        if let Some(parts) = self.harmony.as_mut().map(|h| h.push(delta)) {
            return self.harmony_split(parts);
        }
        let mut out = Split::default();
        self.held.push_str(delta);
        loop {
            let exits = self.exits();
            let first = exits
                .iter()
                .filter_map(|(m, to)| {
                    Some((self.held.find(m.as_str())?, std::cmp::Reverse(m.len()), to))
                })
                .min();
            if let Some((at, std::cmp::Reverse(len), to)) = first {
                let before = self.held[..at].to_string();
                self.held.drain(..at + len);
                self.place(&before, &mut out);
                self.enter(*to, &mut out);
                continue;
            }
            let keep = exits
                .iter()
                .map(|(m, _)| partial_suffix(&self.held, m))
                .max()
                .unwrap_or(0);
            let ready: String = self.held.drain(..self.held.len() - keep).collect();
            self.place(&ready, &mut out);
            return out;
        }
    }

    /// Whatever is held back at the end; a call still open is parsed as it stands.
    pub fn finish(&mut self) -> Split {
        if let Some(parts) = self.harmony.as_mut().map(Harmony::finish) {
            return self.harmony_split(parts);
        }
        let mut out = Split::default();
        let rest = std::mem::take(&mut self.held);
        self.place(&rest, &mut out);
        if self.state == State::Call {
            self.close(false, &mut out);
            self.state = State::Content;
        }
        out
    }

    /// Harmony's parts as a split, its calls numbered with the others.
    fn harmony_split(&mut self, parts: Parts) -> Split {
        let mut out = Split {
            content: parts.content,
            reasoning: parts.reasoning,
            calls: Vec::new(),
        };
        for call in parts.calls {
            self.push_call(call, &mut out);
        }
        out
    }

    /// A parsed call, numbered, as the client gets it.
    fn push_call(&mut self, call: Call, out: &mut Split) {
        out.calls.push(ToolCall {
            index: self.calls,
            id: call.id.unwrap_or_else(|| call_id(self.calls)),
            name: call.name,
            arguments: dumps(&call.arguments),
        });
        self.calls += 1;
    }

    fn place(&mut self, text: &str, out: &mut Split) {
        match self.state {
            State::Content => out.content.push_str(text),
            State::Reasoning => out.reasoning.push_str(text),
            State::Call => self.call.push_str(text),
        }
    }

    fn enter(&mut self, to: State, out: &mut Split) {
        if self.state == State::Call {
            self.close(true, out);
        }
        self.state = to;
    }

    /// Parses the call's text; a call that does not parse goes to the content as it was
    /// generated, markers included, with a warning.
    fn close(&mut self, ended: bool, out: &mut Split) {
        let Some(format) = self.format else {
            return;
        };
        let body = std::mem::take(&mut self.call);
        match format.parse(&body, self.tools.as_ref()) {
            Ok(calls) => {
                for call in calls {
                    self.push_call(call, out);
                }
            }
            Err(e) => {
                let state = if ended { "" } else { " (unterminated)" };
                tracing::warn!(
                    "a {} tool call{state} did not parse, kept as content: {e}",
                    format.name()
                );
                out.content.push_str(format.start());
                out.content.push_str(&body);
                out.content.push_str(if ended { format.end() } else { "" });
            }
        }
    }
}
