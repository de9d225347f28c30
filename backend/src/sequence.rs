//! One request's generation state, stepped from outside: alone by `generate`, or as one row
//! of a batch by the engine's scheduler. Sampling, eos, stops and limits live here, so a
//! request behaves the same in both.

use std::time::{Duration, Instant};

use mlx_rs::Array;

use crate::cache::LayerCache;
use crate::distributed::protocol::CacheOp;
use crate::error::{Error, Result};
use crate::grammar::Mask;
use crate::models::{LanguageModel, Row};
use crate::request::{FinishReason, GenerateOptions, Summary, TokenEvent, TokenLogprob};
use crate::sampling::Sampler;
use crate::speculative::{ngram_draft, DraftLength, DraftModel, DraftState, Drafting};
use crate::stopping::StopMatcher;
use crate::tokenizer::{Detokenizer, Tokenizer};

pub struct Sequence {
    /// How every rank names this sequence's caches.
    pub slot: u64,
    pub caches: Vec<LayerCache>,
    prompt: Vec<u32>,
    /// Prompt tokens already in the caches (all but the last, which is the first step's input).
    prefilled: usize,
    opts: GenerateOptions,
    sampler: Sampler,
    detok: Detokenizer,
    stops: StopMatcher,
    history: Vec<u32>,
    summary: Summary,
    start: Instant,
    /// The next step's input: the last prompt token, then each generated one.
    pub input: u32,
    ended: bool,
    hit_stop_string: bool,
    grammar_time: Duration,
    /// Where a draft model is for this row (empty until it drafts).
    draft_state: DraftState,
    /// How many tokens it proposes next.
    draft_length: DraftLength,
}

impl Sequence {
    pub fn new(
        slot: u64,
        prompt: &[u32],
        opts: GenerateOptions,
        caches: Vec<LayerCache>,
    ) -> Result<Sequence> {
        let Some(&input) = prompt.last() else {
            return Err(Error::InvalidRequest("the prompt is empty".into()));
        };
        Ok(Sequence {
            slot,
            caches,
            prompt: prompt.to_vec(),
            prefilled: 0,
            sampler: Sampler::new(opts.sampling.clone()),
            detok: Detokenizer::new(),
            stops: StopMatcher::new(opts.stop.clone()),
            history: prompt.to_vec(),
            summary: Summary {
                prompt_tokens: prompt.len(),
                generated_tokens: 0,
                prefill_secs: 0.0,
                decode_secs: 0.0,
                finish: FinishReason::Length,
                tail: String::new(),
            },
            start: Instant::now(),
            input,
            ended: opts.max_tokens == 0,
            hit_stop_string: false,
            grammar_time: Duration::ZERO,
            draft_state: DraftState::default(),
            draft_length: DraftLength::new(opts.draft_tokens),
            opts,
        })
    }

    /// Starts from a cached prefix of the prompt (a prefix-cache hit) instead of position 0.
    pub fn resume(&mut self, caches: Vec<LayerCache>) {
        let len = caches.first().map_or(0, |c| c.offset() as usize);
        self.prefilled = len.min(self.prompt.len() - 1);
        self.caches = caches;
    }

    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// The tokens whose keys and values the caches hold: what the prefix cache keys them by.
    pub fn cached_tokens(&self) -> &[u32] {
        let offset = self.caches.first().map_or(0, |c| c.offset() as usize);
        &self.history[..offset.min(self.history.len())]
    }

    /// Whether the prompt (but its last token) is in the caches.
    pub fn prefill_done(&self) -> bool {
        self.prefilled + 1 >= self.prompt.len()
    }

    /// Prompt tokens the next prefill chunk will take (0 when prefill is done).
    pub fn next_chunk_len(&self) -> usize {
        let left = self.prompt.len().saturating_sub(1 + self.prefilled);
        left.min(self.opts.prefill_step.max(1))
    }

    /// Runs the next chunk of the prompt through the model; true when prefill is done. The
    /// step takes the scheduler's cache changes since the last one (`cache_ops`, left in place
    /// when no step runs: a restored prefix may leave nothing to prefill).
    pub fn prefill_chunk(
        &mut self,
        model: &dyn LanguageModel,
        cache_ops: &mut Vec<CacheOp>,
    ) -> Result<bool> {
        if self.prefill_done() {
            return Ok(true);
        }
        let end = (self.prefilled + self.opts.prefill_step.max(1)).min(self.prompt.len() - 1);
        let chunk = &self.prompt[self.prefilled..end];
        let input = Array::from_slice(chunk, &[1, chunk.len() as i32]);
        let mut row = Row {
            slot: self.slot,
            caches: &mut self.caches,
        };
        model.prefill(&input, &mut row, std::mem::take(cache_ops))?;
        self.prefilled = end;
        Ok(self.prefill_done())
    }

    /// No more tokens: eos, a stop, max_tokens or cancellation.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Plain greedy needs no host-side processing, so its token can be picked on the device.
    pub fn plain_greedy(&self) -> bool {
        self.device_greedy() && !self.speculates()
    }

    /// Greedy with nothing for the host to do to its log-probabilities: its tokens are the
    /// device's argmax (at every position of a speculative step).
    pub fn device_greedy(&self) -> bool {
        self.opts.sampling.temperature <= 0.0
            && !self.opts.sampling.has_processors()
            && self.opts.logprobs.is_none()
            && self.opts.constraint.is_none()
    }

    /// Whether this row proposes tokens to verify (never with a grammar: its mask is for one
    /// position).
    pub fn speculates(&self) -> bool {
        self.opts.drafting != Drafting::Off
            && self.opts.draft_tokens > 0
            && self.opts.constraint.is_none()
    }

    /// This step's proposals: as many as the row's `DraftLength` says (at most
    /// `draft_tokens`), and no more than the tokens left to generate after the step's own (so
    /// no step writes past the positions reserved).
    pub fn draft(&mut self, drafter: Option<&DraftModel>) -> Result<Vec<u32>> {
        if !self.speculates() {
            return Ok(Vec::new());
        }
        let left = self
            .opts
            .max_tokens
            .saturating_sub(self.summary.generated_tokens + 1);
        let k = self.draft_length.now().min(left);
        Ok(match (self.opts.drafting, drafter) {
            (Drafting::Ngram, _) => ngram_draft(&self.history, k),
            (Drafting::Model, Some(d)) => d.propose(&mut self.draft_state, &self.history, k)?,
            (Drafting::Model, None) | (Drafting::Off, _) => Vec::new(),
        })
    }

    /// This step's tokens from the log-probabilities of its positions (`vocab` wide: the
    /// input's, then each proposal's): the proposals the sampler takes, in turn, and then one
    /// of the model's own. Push them in order.
    pub fn choose_drafted(
        &mut self,
        logprobs: &[f32],
        vocab: usize,
        drafts: &[u32],
    ) -> Vec<(u32, Option<TokenLogprob>)> {
        let base = self.history.len();
        let mut chosen = Vec::new();
        for (i, raw) in logprobs.chunks(vocab).take(drafts.len() + 1).enumerate() {
            let mut processed = raw.to_vec();
            self.sampler.process(&mut processed, &self.history);
            let (id, taken) = match drafts.get(i) {
                Some(&draft) => self.sampler.verify(&processed, draft),
                None => (self.sampler.sample(&processed), false),
            };
            chosen.push((
                id,
                self.opts.logprobs.map(|top| token_logprob(raw, top, id)),
            ));
            if !taken {
                break;
            }
            // Penalties at the next position see the proposal as taken.
            self.history.push(id);
        }
        self.history.truncate(base);
        chosen
    }

    /// After a step that proposed `proposed` tokens and took `taken`: how many to propose next.
    pub fn drafted(&mut self, proposed: usize, taken: usize) {
        self.draft_length.update(proposed, taken);
    }

    /// After a speculative step, keeps the positions whose tokens the sequence took (`valid`:
    /// up to its input and the proposals taken; fewer if it ended on one) and drops the rest:
    /// the new length, if the caches were cut.
    pub fn keep_positions(&mut self, valid: usize) -> Option<usize> {
        let len = valid.min(self.history.len());
        self.draft_state.keep(len);
        let offset = self.caches.first().map_or(0, |c| c.offset() as usize);
        if offset <= len {
            return None;
        }
        for cache in &mut self.caches {
            cache.trim(len);
        }
        Some(len)
    }

    /// Positions in the caches.
    pub fn cached_len(&self) -> usize {
        self.caches.first().map_or(0, |c| c.offset() as usize)
    }

    /// Host time this request's grammar took since the last call: masking the
    /// log-probabilities and feeding the matcher (computing masks is timed by the batch).
    pub fn take_grammar_time(&mut self) -> Duration {
        std::mem::take(&mut self.grammar_time)
    }

    /// Whether a grammar constrains (or, lazy, may constrain) this request.
    pub fn has_grammar(&self) -> bool {
        self.opts.constraint.is_some()
    }

    /// The tokens the request's grammar allows next (computed while the step's forward pass
    /// runs: it needs only the tokens taken so far).
    pub fn mask(&mut self) -> Mask {
        self.opts
            .constraint
            .as_mut()
            .map_or(Mask::Any, |c| c.mask())
    }

    /// Picks the next token from this step's log-probabilities (f32, on the host) among those
    /// `mask` allows; None ends the sequence: the grammar allows nothing more.
    pub fn choose(
        &mut self,
        mut logprobs: Vec<f32>,
        mask: Mask,
    ) -> Option<(u32, Option<TokenLogprob>)> {
        let raw = self.opts.logprobs.map(|top| (logprobs.clone(), top));
        self.sampler.process(&mut logprobs, &self.history);
        match mask {
            Mask::Any => {}
            Mask::Only(allowed) => {
                let started = Instant::now();
                for (id, l) in logprobs.iter_mut().enumerate() {
                    if !allowed.is_allowed(id as u32) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                self.grammar_time += started.elapsed();
            }
            Mask::Nothing(why) => {
                tracing::warn!(slot = self.slot, "the request ends: {why}");
                self.summary.finish = FinishReason::Grammar;
                self.ended = true;
                return None;
            }
        }
        let id = self.sampler.sample(&logprobs);
        Some((id, raw.map(|(raw, top)| token_logprob(&raw, top, id))))
    }

    /// Takes the chosen token: emits its text through `on_token` (false = the caller left)
    /// and ends the sequence on eos, a stop string or max_tokens.
    pub fn push(
        &mut self,
        tok: &Tokenizer,
        id: u32,
        logprob: Option<TokenLogprob>,
        on_token: &mut dyn FnMut(TokenEvent) -> bool,
    ) -> Result<()> {
        if self.summary.generated_tokens == 0 {
            self.summary.prefill_secs = self.start.elapsed().as_secs_f64();
        }
        if !self.opts.ignore_eos && tok.eos_ids().contains(&id) {
            self.summary.finish = FinishReason::Stop;
            self.ended = true;
            return Ok(());
        }
        self.summary.generated_tokens += 1;
        self.history.push(id);
        if let Some(constraint) = self.opts.constraint.as_mut() {
            let started = Instant::now();
            constraint.accept(id);
            self.grammar_time += started.elapsed();
        }
        let check = self.stops.push(&self.detok.push(tok, id)?);
        if !on_token(TokenEvent {
            id,
            text: check.emit,
            logprob,
        }) {
            self.summary.finish = FinishReason::Cancelled;
            self.ended = true;
        } else if check.stopped {
            self.summary.finish = FinishReason::Stop;
            self.hit_stop_string = true;
            self.ended = true;
        } else if self.summary.generated_tokens >= self.opts.max_tokens {
            self.ended = true;
        }
        self.input = id;
        Ok(())
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.summary.generated_tokens
    }

    /// Ends the sequence: the text held back and the counts.
    pub fn finish(mut self, tok: &Tokenizer) -> Result<Summary> {
        let total = self.start.elapsed().as_secs_f64();
        self.summary.decode_secs = (total - self.summary.prefill_secs).max(0.0);
        if !self.hit_stop_string {
            let mut tail = self.stops.push(&self.detok.finish(tok)?).emit;
            tail.push_str(&self.stops.flush());
            self.summary.tail = tail;
        }
        Ok(self.summary)
    }
}

/// The chosen token's log-probability and the `top` best alternatives.
fn token_logprob(logprobs: &[f32], top: usize, id: u32) -> TokenLogprob {
    let mut best: Vec<(u32, f32)> = logprobs
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let n = top.min(best.len());
    if n > 0 {
        best.select_nth_unstable_by(n - 1, |a, b| b.1.total_cmp(&a.1));
    }
    best.truncate(n);
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    TokenLogprob {
        logprob: logprobs[id as usize],
        top: best,
    }
}
