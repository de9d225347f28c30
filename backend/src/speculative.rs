//! Speculative decoding on rank 0: each step, a row proposes a few tokens it expects to come
//! next, and one forward pass over its input and the proposals verifies them all (every rank
//! takes part, as in any step). The row keeps the proposals the model agrees with, by the
//! sampler's speculative rule, and one token of the model's own; the cache positions of the
//! rest are dropped. Greedy output is the same as without speculation.

use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::{argmax_axis, IndexOp};
use mlx_rs::Array;

use crate::cache::LayerCache;
use crate::error::Result;
use crate::models::{LanguageModel, Row};

/// Where a row's proposals come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Drafting {
    #[default]
    Off,
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the output's
    /// last few tokens, in the prompt or the output (option `speculative:ngram`).
    Ngram,
    /// A draft model's greedy tokens (`ModelOptions.DraftModel`).
    Model,
}

impl Drafting {
    /// The option's value: `ngram`, `draft`, or `off`/`none`.
    pub fn parse(value: &str) -> Option<Drafting> {
        match value.trim().to_ascii_lowercase().as_str() {
            "ngram" | "prompt_lookup" => Some(Drafting::Ngram),
            "draft" | "draft_model" => Some(Drafting::Model),
            "off" | "none" | "" => Some(Drafting::Off),
            _ => None,
        }
    }
}

/// Proposals per step when neither the request (`NDraft`) nor the model (`num_draft_tokens`)
/// says.
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

/// The most proposals a step may verify: more rarely pay, and each is a position of KV.
pub const MAX_DRAFT_TOKENS: usize = 32;
// A step takes back at most its proposals and input, which sliding-window caches keep.
const _: () = assert!(MAX_DRAFT_TOKENS < crate::cache::MAX_ROLLBACK as usize);

/// The longest and shortest suffix prompt lookup matches: the longest match wins, as in
/// vLLM's and llama.cpp's prompt lookup. A single token's earlier occurrence predicts little
/// (SmolLM2's greedy output: 52% of proposals taken from one-token matches and longer, 56%
/// from two and longer, at a fifth fewer proposals), and on a CPU every proposal verified
/// costs a good part of a step.
const NGRAM_MAX: usize = 3;
const NGRAM_MIN: usize = 2;

/// How many tokens a row proposes next, between 1 and the request's `draft_tokens`: Hugging
/// Face's assisted generation's "heuristic" schedule, two more after a step that took all
/// its proposals and one fewer after one that refused one. A verified proposal costs a
/// position of compute whether it is taken or not, so a row proposes many only while they
/// keep being taken (copying its prompt) and few while they are not (writing freely).
#[derive(Debug, Clone, Copy)]
pub struct DraftLength {
    now: usize,
    max: usize,
}

impl DraftLength {
    pub fn new(max: usize) -> DraftLength {
        DraftLength { now: max, max }
    }

    /// Proposals for the next step.
    pub fn now(&self) -> usize {
        self.now
    }

    /// After a step that proposed `proposed` tokens and took `taken` of them.
    pub fn update(&mut self, proposed: usize, taken: usize) {
        if proposed == 0 {
            return;
        }
        self.now = match taken >= proposed {
            true => (self.now + 2).min(self.max),
            false => self.now.saturating_sub(1).max(1),
        };
    }
}

/// Up to `k` tokens that followed the latest earlier occurrence of `history`'s last n tokens
/// (n from `NGRAM_MAX` down to `NGRAM_MIN`); none if no suffix occurred before.
pub fn ngram_draft(history: &[u32], k: usize) -> Vec<u32> {
    if k == 0 {
        return Vec::new();
    }
    for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
        if history.len() <= n {
            continue;
        }
        let suffix = &history[history.len() - n..];
        // Latest first, and never the suffix itself.
        let found = (0..history.len() - n)
            .rev()
            .find(|&at| &history[at..at + n] == suffix);
        if let Some(at) = found {
            let from = at + n;
            let to = (from + k).min(history.len());
            return history[from..to].to_vec();
        }
    }
    Vec::new()
}

/// A small model with the target's tokenizer, on rank 0 only, that proposes its greedy
/// tokens. Greedy proposals are made with certainty, so the sampler's rule for them holds
/// for sampled requests too.
pub struct DraftModel {
    model: Box<dyn LanguageModel>,
    /// Tokens per forward pass when it catches up with a prompt.
    chunk: usize,
    /// Ids below this are tokens of the model it drafts for (a draft's padded embedding rows
    /// are not: a proposal from them would index past the model's own).
    vocab: u32,
}

/// A row's place in the draft model: its caches, and how many of the row's tokens they hold.
#[derive(Default)]
pub struct DraftState {
    caches: Vec<LayerCache>,
    fed: usize,
}

impl DraftState {
    /// Keeps the first `len` tokens (those the row kept); the draft feeds the rest next time.
    pub fn keep(&mut self, len: usize) {
        self.fed = self.fed.min(len);
        for cache in &mut self.caches {
            cache.trim(self.fed);
        }
    }
}

impl DraftModel {
    pub fn new(model: Box<dyn LanguageModel>, chunk: usize, vocab: usize) -> DraftModel {
        DraftModel {
            model,
            chunk: chunk.max(1),
            vocab: u32::try_from(vocab).unwrap_or(u32::MAX),
        }
    }

    /// Up to `k` greedy tokens after `history`: the draft catches up with the tokens it has
    /// not seen (the prompt in chunks), then takes `k - 1` one-token steps, all built lazily
    /// and read once.
    pub fn propose(&self, state: &mut DraftState, history: &[u32], k: usize) -> Result<Vec<u32>> {
        if k == 0 || state.fed >= history.len() {
            return Ok(Vec::new());
        }
        if state.caches.is_empty() {
            state.caches = self.model.new_caches();
        }
        let pending = &history[state.fed..];
        let split = pending.len() - (pending.len() - 1) % self.chunk - 1;
        for chunk in pending[..split].chunks(self.chunk) {
            let input = Array::from_slice(chunk, &[1, chunk.len() as i32]);
            let caches = &mut state.caches;
            self.model
                .prefill(&input, &mut Row { slot: 0, caches }, Vec::new())?;
        }
        let last = &pending[split..];
        let mut input = Array::from_slice(last, &[1, last.len() as i32]);
        let mut proposals = Vec::with_capacity(k);
        for _ in 0..k {
            let logits = self.model.forward(&input, &mut state.caches)?;
            let next = argmax_axis(logits.index((.., -1, ..)), -1, false)?;
            input = next.reshape(&[1, 1])?;
            proposals.push(next);
        }
        // Every proposal but the last was fed: the caches hold them after the history.
        let ids = concatenate(&proposals, 0)?;
        ids.eval()?;
        state.fed = history.len() + k - 1;
        let ids = ids.as_slice::<u32>().iter().copied();
        Ok(ids.take_while(|&id| id < self.vocab).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_lookup_continues_the_latest_longest_match() {
        // "1 2 3" occurred at 0 and at 5; the later occurrence wins.
        let h = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3];
        assert_eq!(ngram_draft(&h, 2), [7, 8]);
        // A proposal stops at the end of the history.
        assert_eq!(ngram_draft(&[5, 6, 7, 5, 6], 4), [7, 5, 6]);
        // One token seen before is no match.
        assert_eq!(ngram_draft(&[5, 6, 5], 4), Vec::<u32>::new());
        // The longest suffix that occurred before wins over a later shorter one.
        let h = [4, 5, 6, 1, 6, 2, 4, 5, 6];
        assert_eq!(ngram_draft(&h, 3), [1, 6, 2]);
        // Nothing occurred before; nothing asked for.
        assert_eq!(ngram_draft(&[1, 2, 3], 4), Vec::<u32>::new());
        assert_eq!(ngram_draft(&[1, 1], 0), Vec::<u32>::new());
    }

    #[test]
    fn a_row_proposes_more_while_all_are_taken_and_fewer_when_one_is_refused() {
        let mut length = DraftLength::new(6);
        assert_eq!(length.now(), 6);
        length.update(6, 2);
        assert_eq!(length.now(), 5);
        length.update(0, 0); // nothing proposed: no news
        assert_eq!(length.now(), 5);
        for _ in 0..10 {
            length.update(length.now(), 0);
        }
        assert_eq!(length.now(), 1, "never below one");
        length.update(1, 1);
        assert_eq!(length.now(), 3);
        length.update(3, 3);
        length.update(5, 5);
        assert_eq!(length.now(), 6, "never above the request's");
    }

    #[test]
    fn options_name_the_drafting() {
        assert_eq!(Drafting::parse("ngram"), Some(Drafting::Ngram));
        assert_eq!(Drafting::parse(" Off"), Some(Drafting::Off));
        assert_eq!(Drafting::parse("eagle"), None);
    }
}
