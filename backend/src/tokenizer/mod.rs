//! Tokenizer, chat template and end-of-sequence ids of a model folder.

mod chat;
mod detokenizer;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

pub use chat::{ChatMessage, ChatTemplate, TemplateInput};
pub use detokenizer::Detokenizer;

use crate::error::{read_json, Error, Result};

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_token: Option<String>,
    eos_token: Option<String>,
    eos_ids: BTreeSet<u32>,
    template: Option<ChatTemplate>,
    tool_parser_type: Option<String>,
}

impl Tokenizer {
    /// Loads `tokenizer.json`, `tokenizer_config.json`, the chat template and every eos id.
    pub fn load(dir: &Path) -> Result<Tokenizer> {
        let file = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", file.display())))?;
        let config = optional_json(&dir.join("tokenizer_config.json"))?;
        let token = |name: &str| match &config[name] {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
            _ => None,
        };
        let (bos_token, eos_token) = (token("bos_token"), token("eos_token"));

        let mut eos_ids = BTreeSet::new();
        collect_ids(&configured_eos(dir)?, &mut eos_ids);
        if let Some(id) = eos_token.as_deref().and_then(|t| inner.token_to_id(t)) {
            eos_ids.insert(id);
        }

        let template = ChatTemplate::find(dir, &config)?;
        Ok(Tokenizer {
            inner,
            bos_token,
            eos_token,
            eos_ids,
            template,
            tool_parser_type: tool_parser_type(&config)?,
        })
    }

    /// Token ids of `text`; special tokens (BOS) are added unless the text already starts with BOS, as mlx-lm does.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let add_special = self
            .bos_token
            .as_deref()
            .is_none_or(|bos| !text.starts_with(bos));
        let encoding = self
            .inner
            .encode(text, add_special)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`, special tokens included, as mlx-lm's streaming detokenizers and
    /// `tokenizer.decode` give it: tool-call and reasoning markers a tokenizer marks special
    /// (`[TOOL_CALLS]`, `<|tool_calls_section_begin|>`) reach the output parsers. The end token
    /// that stops generation is never decoded: it never reaches the detokenizer.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Renders messages through the model's chat template.
    pub fn apply_chat_template(&self, input: &TemplateInput) -> Result<String> {
        let template = self
            .template
            .as_ref()
            .ok_or_else(|| Error::Template("the model has no chat template".into()))?;
        template.render(input, self.bos_token.as_deref(), self.eos_token.as_deref())
    }

    /// The chat template's Jinja source, if the model has one.
    pub fn template_source(&self) -> Option<&str> {
        self.template.as_ref().map(ChatTemplate::source)
    }

    /// The ids that end generation: mlx-lm's `eos_token_ids`. The one generated is not decoded.
    pub fn eos_ids(&self) -> &BTreeSet<u32> {
        &self.eos_ids
    }

    /// `tokenizer_config.json`'s `tool_parser_type`: the mlx-lm tool parser the model names,
    /// which mlx-lm takes before inferring one from the chat template.
    pub fn tool_parser_type(&self) -> Option<&str> {
        self.tool_parser_type.as_deref()
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The text of one token as the vocabulary has it (for logprobs).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Whether `other` gives every text the same ids: the same vocabulary (special tokens
    /// included) and the same ids for a sample of texts; the first difference, named.
    pub fn same_as(&self, other: &Tokenizer) -> std::result::Result<(), String> {
        let (mine, theirs) = (self.inner.get_vocab(true), other.inner.get_vocab(true));
        if mine.len() != theirs.len() {
            return Err(format!("{} tokens against {}", theirs.len(), mine.len()));
        }
        let mut differing: Vec<(&String, &u32)> = mine
            .iter()
            .filter(|(token, id)| theirs.get(*token) != Some(*id))
            .collect();
        differing.sort();
        if let Some((token, id)) = differing.first() {
            let theirs = theirs.get(*token).map_or("none".into(), u32::to_string);
            return Err(format!(
                "token {token:?} is id {id} here and {theirs} there"
            ));
        }
        for text in [
            "Hello, world! 123",
            " def f(x):\n\treturn x",
            "naïve café 東京",
        ] {
            let (a, b) = (self.encode(text), other.encode(text));
            if a.as_ref().ok() != b.as_ref().ok() {
                return Err(format!("{text:?} is tokenized differently"));
            }
        }
        Ok(())
    }
}

/// A JSON file that may be absent (then `null`).
fn optional_json(path: &Path) -> Result<Value> {
    if path.is_file() {
        read_json(path)
    } else {
        Ok(Value::Null)
    }
}

/// The configured end ids as mlx-lm's `load_config` takes them: `generation_config.json`'s
/// `eos_token_id` replaces `config.json`'s unless Python finds it false (null, 0, `[]`).
fn configured_eos(dir: &Path) -> Result<Value> {
    let generation = optional_json(&dir.join("generation_config.json"))?;
    let ids = &generation["eos_token_id"];
    let falsy = match ids {
        Value::Null | Value::Bool(false) => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(items) => items.is_empty(),
        _ => false,
    };
    match falsy {
        true => Ok(optional_json(&dir.join("config.json"))?["eos_token_id"].take()),
        false => Ok(ids.clone()),
    }
}

/// `tool_parser_type`, which must be a parser's name when present.
fn tool_parser_type(config: &Value) -> Result<Option<String>> {
    match &config["tool_parser_type"] {
        Value::Null => Ok(None),
        Value::String(name) => Ok(Some(name.clone())),
        other => Err(Error::Tokenizer(format!(
            "tokenizer_config.json: tool_parser_type must be a parser's name, not {other}"
        ))),
    }
}

fn collect_ids(value: &Value, out: &mut BTreeSet<u32>) {
    match value {
        Value::Number(n) => out.extend(n.as_u64().map(|n| n as u32)),
        Value::Array(items) => items.iter().for_each(|v| collect_ids(v, out)),
        _ => {}
    }
}
