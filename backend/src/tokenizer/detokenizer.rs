//! Incremental, UTF-8-safe detokenizing: the deltas concatenate to exactly `decode(all ids)`,
//! special tokens included (as mlx-lm's streaming detokenizers give them).

use super::Tokenizer;
use crate::error::Result;

/// Holds back text until it ends on a whole character, decoding only a small window.
#[derive(Debug, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    /// Start of the window decoded for context.
    prefix_offset: usize,
    /// End of what has been emitted.
    read_offset: usize,
    /// Bytes emitted so far.
    emitted: usize,
}

impl Detokenizer {
    pub fn new() -> Detokenizer {
        Detokenizer::default()
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Adds a token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        self.delta(tok, false)
    }

    /// Everything not yet emitted, even an incomplete character.
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        self.delta(tok, true)
    }

    fn delta(&mut self, tok: &Tokenizer, last: bool) -> Result<String> {
        let prefix = tok.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let text = tok.decode(&self.ids[self.prefix_offset..])?;
        if text.len() <= prefix.len() || (!last && text.ends_with('\u{FFFD}')) {
            return Ok(String::new());
        }
        let delta = if text.starts_with(&prefix) {
            text[prefix.len()..].to_string()
        } else {
            // The window changed its earlier text: fall back to the whole decode.
            let all = tok.decode(&self.ids)?;
            all.get(self.emitted..).unwrap_or_default().to_string()
        };
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.emitted += delta.len();
        Ok(delta)
    }
}
