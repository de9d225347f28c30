//! OpenAI's harmony format (gpt-oss), which mlx-lm does not parse: the output is a series of
//! messages `<|start|>{header}<|message|>{body}<|end|>` (the last ending `<|return|>` or
//! `<|call|>`, often left out as the stop token). The header names a channel
//! (`<|channel|>analysis`, `commentary` or `final`) and may name a recipient (`to=NAME`, in the
//! role part or after the channel), then perhaps a content type (`<|constrain|>json`).
//! `analysis` is reasoning, `final` and `commentary` without a recipient (a preamble) content,
//! and a message to `functions.NAME` a tool call whose body is its JSON arguments. A call
//! that does not parse stays in the content as it was generated.

use serde_json::Value;

use super::Call;
use crate::stopping::partial_suffix;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
/// What ends a message: done, done for this turn, or a call to run.
const ENDS: [&str; 3] = ["<|end|>", "<|return|>", "<|call|>"];

/// Where the text being read goes.
#[derive(Debug, Clone, PartialEq)]
enum Place {
    /// Between messages: text here is stray, kept as content.
    Between,
    /// A message's header, up to `<|message|>`.
    Header,
    Reasoning,
    Content,
    /// A message to `functions.NAME`: its body is gathered, then parsed.
    Call(String),
}

/// One delta's share, as the splitter places it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Parts {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<Call>,
}

/// A request's harmony output, read as it streams.
#[derive(Debug)]
pub(crate) struct Harmony {
    place: Place,
    /// Text that could still be the start of a marker.
    held: String,
    /// The current message as generated so far (markers included), kept while its header or
    /// a call's body is read: what goes to the content if it is not a call after all.
    raw: String,
    /// The current header's text.
    header: String,
    /// The current call's body.
    body: String,
}

impl Harmony {
    /// The output continues the prompt: inside the header its last `<|start|>` opened
    /// (`<|start|>assistant`, as the chat template ends), or inside the body that header
    /// introduced when the prompt already holds `<|message|>`.
    pub(crate) fn new(prompt: &str) -> Harmony {
        let mut h = Harmony {
            place: Place::Header,
            held: String::new(),
            raw: String::new(),
            header: String::new(),
            body: String::new(),
        };
        let tail = prompt
            .rfind(START)
            .map_or("", |at| &prompt[at + START.len()..]);
        match tail.find(MESSAGE) {
            Some(at) if !ENDS.iter().any(|e| tail[at..].contains(e)) => {
                h.place = body_place(&tail[..at]);
            }
            _ => h.header = tail.to_string(),
        }
        h
    }

    /// The markers that matter where the reader is.
    fn markers(&self) -> Vec<&'static str> {
        match self.place {
            Place::Between => vec![START, CHANNEL],
            Place::Header => vec![MESSAGE, START],
            _ => ENDS.to_vec(),
        }
    }

    pub(crate) fn push(&mut self, delta: &str) -> Parts {
        let mut out = Parts::default();
        self.held.push_str(delta);
        loop {
            let markers = self.markers();
            let first = (markers.iter())
                .filter_map(|m| Some((self.held.find(m)?, std::cmp::Reverse(m.len()), *m)))
                .min();
            if let Some((at, _, marker)) = first {
                let before: String = self.held.drain(..at + marker.len()).collect();
                self.place_text(&before[..at], &mut out);
                self.at_marker(marker, &mut out);
                continue;
            }
            let keep = (markers.iter())
                .map(|m| partial_suffix(&self.held, m))
                .max()
                .unwrap_or(0);
            let ready: String = self.held.drain(..self.held.len() - keep).collect();
            self.place_text(&ready, &mut out);
            return out;
        }
    }

    /// What is held at the end: a call's body parsed as it stands (its `<|call|>` is the
    /// stop token, left out), an unfinished header kept as content.
    pub(crate) fn finish(&mut self) -> Parts {
        let mut out = Parts::default();
        let rest = std::mem::take(&mut self.held);
        self.place_text(&rest, &mut out);
        match std::mem::replace(&mut self.place, Place::Between) {
            Place::Call(name) => self.close_call(&name, "", &mut out),
            Place::Header => out.content.push_str(&std::mem::take(&mut self.raw)),
            _ => {}
        }
        out
    }

    fn place_text(&mut self, text: &str, out: &mut Parts) {
        match &self.place {
            Place::Between | Place::Content => out.content.push_str(text),
            Place::Reasoning => out.reasoning.push_str(text),
            Place::Header => {
                self.header.push_str(text);
                self.raw.push_str(text);
            }
            Place::Call(_) => {
                self.body.push_str(text);
                self.raw.push_str(text);
            }
        }
    }

    fn at_marker(&mut self, marker: &'static str, out: &mut Parts) {
        match (&self.place, marker) {
            (Place::Between, START) | (Place::Header, START) => {
                // A header cut short by a new message is kept as the text it was.
                out.content.push_str(&std::mem::take(&mut self.raw));
                self.open_header(START, "");
            }
            (Place::Between, _) => self.open_header("", CHANNEL),
            (Place::Header, _) => {
                self.place = body_place(&self.header);
                self.raw.push_str(MESSAGE);
                if !matches!(self.place, Place::Call(_)) {
                    self.raw.clear();
                }
            }
            (Place::Call(name), end) => {
                let name = name.clone();
                self.place = Place::Between;
                self.close_call(&name, end, out);
            }
            _ => self.place = Place::Between,
        }
    }

    /// A new header, its raw text starting with `marker` and its text with `text`.
    fn open_header(&mut self, marker: &str, text: &str) {
        self.place = Place::Header;
        self.header = text.to_string();
        self.raw = format!("{marker}{text}");
    }

    /// The call's body as JSON arguments; a body that is not JSON goes to the content as the
    /// message was generated (`end`: its end marker, empty when the output stopped there).
    fn close_call(&mut self, name: &str, end: &str, out: &mut Parts) {
        let body = std::mem::take(&mut self.body);
        let raw = std::mem::take(&mut self.raw);
        match serde_json::from_str::<Value>(body.trim()) {
            Ok(arguments) => out.calls.push(Call::new(name, arguments)),
            Err(e) => {
                tracing::warn!("a harmony tool call to {name} did not parse, kept as content: {e}");
                out.content.push_str(&raw);
                out.content.push_str(end);
            }
        }
    }
}

/// Where a message's body goes, from its header: a call when it is addressed to
/// `functions.NAME`, reasoning on `analysis`, content otherwise (`final`, a preamble on
/// `commentary`, or a message to a built-in tool, shown as it is).
fn body_place(header: &str) -> Place {
    let words = header.replace("<|constrain|>", " <|constrain|>");
    let recipient = (words.split_whitespace())
        .chain(
            header
                .split(CHANNEL)
                .skip(1)
                .flat_map(str::split_whitespace),
        )
        .find_map(|w| w.strip_prefix("to="));
    if let Some(name) = recipient.and_then(|r| r.split('<').next()?.strip_prefix("functions.")) {
        return Place::Call(name.to_string());
    }
    let channel = header
        .split(CHANNEL)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '<').next());
    match channel {
        Some("analysis") if recipient.is_none() => Place::Reasoning,
        _ => Place::Content,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The deltas through one reader, everything gathered.
    fn read(prompt: &str, deltas: &[&str]) -> Parts {
        let mut h = Harmony::new(prompt);
        let mut all = Parts::default();
        let mut parts: Vec<Parts> = deltas.iter().map(|d| h.push(d)).collect();
        parts.push(h.finish());
        for d in parts {
            all.content.push_str(&d.content);
            all.reasoning.push_str(&d.reasoning);
            all.calls.extend(d.calls);
        }
        all
    }

    const PROMPT: &str = "<|start|>user<|message|>Weather in SF?<|end|><|start|>assistant";

    #[test]
    fn reasoning_then_final() {
        let got = read(
            PROMPT,
            &[
                "<|channel|>analysis<|message|>User asks",
                " weather.<|end|><|start|>assistant<|channel|>final<|message|>It is ",
                "sunny.",
            ],
        );
        assert_eq!(got.reasoning, "User asks weather.");
        assert_eq!(got.content, "It is sunny.");
        assert!(got.calls.is_empty());
    }

    #[test]
    fn a_call_split_across_deltas() {
        let text = "<|channel|>analysis<|message|>Need get_weather.<|end|><|start|>assistant\
                    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
                    {\"location\": \"San Francisco\"}<|call|>";
        // Every split point, markers cut anywhere.
        for cut in 1..text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let got = read(PROMPT, &[&text[..cut], &text[cut..]]);
            assert_eq!(got.reasoning, "Need get_weather.", "cut at {cut}");
            assert_eq!(got.content, "", "cut at {cut}");
            let want = Call::new("get_weather", json!({"location": "San Francisco"}));
            assert_eq!(got.calls, [want], "cut at {cut}");
        }
    }

    #[test]
    fn a_call_ended_by_its_stop_token_and_a_recipient_in_the_role() {
        let got = read(
            PROMPT,
            &[
                "<|channel|>commentary<|message|>Checking.<|end|>",
                "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>",
                "{\"q\": [1, 2]}",
            ],
        );
        assert_eq!(got.content, "Checking.");
        assert_eq!(got.calls, [Call::new("lookup", json!({"q": [1, 2]}))]);
    }

    #[test]
    fn a_malformed_call_stays_as_text() {
        let call = "<|start|>assistant<|channel|>commentary to=functions.f<|constrain|>json\
                    <|message|>{\"a\": oops<|call|>";
        let got = read(
            PROMPT,
            &["<|channel|>final<|message|>Hi.<|end|>", call, " after"],
        );
        assert!(got.calls.is_empty());
        assert_eq!(got.content, format!("Hi.{call} after"));
    }

    #[test]
    fn the_prompt_may_open_the_body() {
        let prompt = "<|start|>assistant<|channel|>final<|message|>";
        assert_eq!(read(prompt, &["Done."]).content, "Done.");
        let prompt = "<|start|>assistant<|channel|>analysis<|message|>";
        assert_eq!(read(prompt, &["Hmm<|end|>"]).reasoning, "Hmm");
    }

    #[test]
    fn built_in_tools_and_stray_text_stay_visible() {
        let got = read(
            PROMPT,
            &[
                "<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|end|>",
                "tail",
            ],
        );
        assert_eq!(got.content, "{\"q\": 1}tail");
        assert!(got.calls.is_empty() && got.reasoning.is_empty());
    }
}
