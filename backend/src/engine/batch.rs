//! Continuous batching on the engine thread: requests in flight share each decode step as
//! rows of one forward pass; a new request's prefill runs (a chunk per round) between steps,
//! and a finished request leaves without stalling the others.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx_rs::ops::indexing::argmax_axis;
use mlx_rs::{Array, Dtype};

use crate::distributed::protocol::CacheOp;
use crate::error::{Error, Result};
use crate::generate::last_logprobs;
use crate::grammar::Mask;
use crate::models::{LanguageModel, Queueing, Row};
use crate::prefix_cache::{CacheStats, PrefixCache};
use crate::request::{Event, Events, GenerateOptions, Summary, TokenLogprob};
use crate::sequence::Sequence;
use crate::speculative::DraftModel;
use crate::tokenizer::Tokenizer;

/// Counts a request from the moment it is accepted until it is answered.
pub struct InFlight(pub Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A tokenized request waiting for a row.
pub struct Waiting {
    pub ids: Vec<u32>,
    pub options: GenerateOptions,
    pub events: Events,
    pub since: Instant,
    pub _in_flight: Option<InFlight>,
}

struct Active {
    seq: Sequence,
    events: Events,
    _in_flight: Option<InFlight>,
    /// KV bytes held for this row: its prompt plus max_tokens positions.
    reserved: usize,
    /// Whether the prefix cache was asked for this row's prompt yet.
    looked_up: bool,
    /// Its generated tokens already added to the batch's `Throughput`.
    counted: usize,
}

/// How many rows a batch holds, how long a request may wait for one, and the KV memory the
/// rows and the prefix cache may hold together.
pub struct BatchLimits {
    pub max_batch: usize,
    pub queue_timeout: Duration,
    pub kv_budget: usize,
    /// Prompt tokens prefilled per round, over all the rows that need it.
    pub prefill_budget: usize,
}

use crate::options::bounds::MAX_QUEUE_TIMEOUT_SECS;

/// `queue_timeout` within `MAX_QUEUE_TIMEOUT_SECS`, or an error naming both.
pub fn check_queue_timeout(secs: u64) -> Result<()> {
    match secs > MAX_QUEUE_TIMEOUT_SECS {
        true => Err(Error::InvalidRequest(format!(
            "queue_timeout is {secs} s, above its limit of {MAX_QUEUE_TIMEOUT_SECS} s"
        ))),
        false => Ok(()),
    }
}

/// A prompt at least this long is saved in the prefix cache as soon as it is prefilled, so
/// requests right behind it that share it need not wait for it to finish.
const SNAPSHOT_MIN_TOKENS: usize = 64;

#[derive(Default)]
pub struct Batch {
    waiting: VecDeque<Waiting>,
    active: Vec<Active>,
    next_slot: u64,
    cache: PrefixCache,
    /// An all-greedy step queued before the host read the one before it.
    ahead: Option<Ahead>,
    /// Changes to the caches since the last step, which the next step carries to the other
    /// ranks of a cluster (slots saved, restored or released, entries evicted).
    cache_ops: Vec<CacheOp>,
    host_stats: HostStats,
    /// The draft model rows propose with (`Drafting::Model`).
    drafter: Option<DraftModel>,
    throughput: Throughput,
}

/// Tokens the batch has processed, counted as the steps run (not when requests end), so
/// rates over a few seconds follow a long request live.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Throughput {
    /// Prompt tokens prefilled (a cached prefix is not counted).
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Time spent prefilling them: prompt tokens over it is the prefill speed, which the
    /// wall-clock rate hides between requests.
    pub prefill_secs: f64,
}

/// What the host steps' grammars and speculation came to.
#[derive(Debug, Clone, Copy, Default)]
struct HostStats {
    grammar: GrammarTime,
    speculation: Speculation,
}

/// Host time grammars took in the steps with a constrained row, against those steps' wall
/// time: what the mask-cost benchmark reads from GetMetrics.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct GrammarTime {
    pub steps: u64,
    /// Computing masks (while the device runs the step), then masking each row's
    /// log-probabilities and feeding its token to the matcher.
    pub mask_secs: f64,
    /// From building the step's graph to every row's token taken.
    pub step_secs: f64,
}

/// The rows a queued step runs over, and its tokens (lazy, one per row).
struct Ahead {
    slots: Vec<u64>,
    ids: Array,
}

/// KV bytes a request may come to hold: its prompt, max_tokens positions and a step's
/// proposals, in the cache's allocation steps.
pub fn kv_reservation(model: &dyn LanguageModel, prompt: usize, opts: &GenerateOptions) -> usize {
    let positions = (prompt + opts.max_tokens + opts.draft_tokens).div_ceil(256) * 256;
    model.kv_bytes(positions, opts.prefill_step.max(1))
}

impl Batch {
    /// An empty batch with a prefix cache of `max_cache_entries` (0: none).
    pub fn new(max_cache_entries: usize) -> Batch {
        Batch {
            cache: PrefixCache::new(max_cache_entries),
            ..Batch::default()
        }
    }

    /// A model whose sliding layers have `windows` reuses a prefix only where they hold it.
    pub fn with_windows(mut self, windows: Vec<i32>) -> Batch {
        self.cache = std::mem::take(&mut self.cache).with_windows(windows);
        self
    }

    /// Rows that draft with a model propose with `drafter`.
    pub fn with_drafter(mut self, drafter: Option<DraftModel>) -> Batch {
        self.drafter = drafter;
        self
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    pub fn grammar_time(&self) -> GrammarTime {
        self.host_stats.grammar
    }

    pub fn speculation(&self) -> Speculation {
        self.host_stats.speculation
    }

    pub fn throughput(&self) -> Throughput {
        self.throughput
    }

    /// Requests waiting for a row.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// Rows running (prefilling or generating).
    pub fn running(&self) -> usize {
        self.active.len()
    }

    /// KV bytes held for running rows.
    pub fn reserved(&self) -> usize {
        self.active.iter().map(|a| a.reserved).sum()
    }

    /// Nothing queued and nothing running.
    pub fn idle(&self) -> bool {
        self.waiting.is_empty() && self.active.is_empty()
    }

    pub fn enqueue(&mut self, w: Waiting) {
        self.waiting.push_back(w);
    }

    /// Fails every request, queued or running (a failed step, an unload, a lost rank), and
    /// empties the prefix cache: after a failure no cached state is trusted.
    pub fn fail_all(&mut self, e: &Error) {
        self.ahead = None;
        for w in self.waiting.drain(..) {
            let _ = w.events.send(Err(e.for_each_request()));
        }
        for a in self.active.drain(..) {
            self.cache_ops.push(CacheOp::Release { slot: a.seq.slot });
            let _ = a.events.send(Err(e.for_each_request()));
        }
        for entry in self.cache.clear() {
            self.cache_ops.push(CacheOp::Evict { entry });
        }
    }

    /// The senders of every request a round may run, to fail them from another thread: the
    /// waiting ones too, since the round admits some of them before its first step.
    pub fn senders(&self) -> Vec<Events> {
        let waiting = self.waiting.iter().map(|w| &w.events);
        waiting
            .chain(self.active.iter().map(|a| &a.events))
            .cloned()
            .collect()
    }

    /// One round: admit, one prefill chunk, one decode step over every ready row, retire.
    /// Returns the summaries of the requests that finished.
    pub fn round(
        &mut self,
        model: &dyn LanguageModel,
        tok: &Tokenizer,
        limits: &BatchLimits,
    ) -> Result<Vec<Summary>> {
        self.expire(limits);
        self.admit(model, limits);
        self.prefill(model, limits.prefill_budget)?;
        self.decode(model, tok)?;
        for a in &mut self.active {
            let generated = a.seq.generated();
            self.throughput.generated_tokens += generated.saturating_sub(a.counted) as u64;
            a.counted = generated;
        }
        self.retire(tok)
    }

    /// Drops requests whose client left, and fails those that waited too long.
    fn expire(&mut self, limits: &BatchLimits) {
        self.waiting.retain(|w| {
            if w.events.is_closed() {
                return false;
            }
            if w.since.elapsed() <= limits.queue_timeout {
                return true;
            }
            let _ = w.events.send(Err(Error::Overloaded(format!(
                "the request waited {} s for one of the {} batch rows (queue_timeout)",
                limits.queue_timeout.as_secs(),
                limits.max_batch
            ))));
            false
        });
    }

    /// Takes waiting requests in order while a row is free and their KV fits the budget
    /// (evicting cached prefixes to make room); a request that does not fit waits.
    fn admit(&mut self, model: &dyn LanguageModel, limits: &BatchLimits) {
        while self.active.len() < limits.max_batch {
            let Some(w) = self.waiting.front() else {
                break;
            };
            let need = kv_reservation(model, w.ids.len(), &w.options);
            let fits = |b: &Batch| b.reserved() + need + b.cache.bytes() <= limits.kv_budget;
            while !fits(self) {
                let Some(entry) = self.cache.evict_lru() else {
                    break;
                };
                self.cache_ops.push(CacheOp::Evict { entry });
            }
            if !fits(self) && !self.active.is_empty() {
                break;
            }
            let w = self.waiting.pop_front().expect("a waiting request");
            self.next_slot += 1;
            match Sequence::new(self.next_slot, &w.ids, w.options, model.new_caches()) {
                Ok(seq) => self.active.push(Active {
                    seq,
                    events: w.events,
                    _in_flight: w._in_flight,
                    reserved: need,
                    looked_up: false,
                    counted: 0,
                }),
                Err(e) => {
                    let _ = w.events.send(Err(e));
                }
            }
        }
    }

    /// Prefill chunks of the rows still prefilling, in order, up to `budget` prompt tokens a
    /// round (at least one chunk), so short prompts that arrive together all join the next
    /// decode step. A row's first chunk starts from the longest cached prefix of its prompt; a
    /// long prompt is cached once prefilled.
    fn prefill(&mut self, model: &dyn LanguageModel, budget: usize) -> Result<()> {
        let mut spent = 0;
        // A row that ended before it began (max_tokens 0: a prompt that fills the context) is
        // not prefilled; `retire` answers it.
        while let Some(a) = self
            .active
            .iter_mut()
            .find(|a| !a.seq.prefill_done() && !a.seq.ended())
        {
            if !a.looked_up {
                a.looked_up = true;
                if let Some(hit) = self.cache.lookup(a.seq.prompt()) {
                    self.cache_ops.push(CacheOp::Restore {
                        slot: a.seq.slot,
                        entry: hit.entry,
                        len: hit.len,
                    });
                    a.seq.resume(hit.caches);
                }
            }
            let chunk = a.seq.next_chunk_len();
            if spent > 0 && spent + chunk > budget {
                break;
            }
            spent += chunk;
            let started = Instant::now();
            let done = a.seq.prefill_chunk(model, &mut self.cache_ops)?;
            self.throughput.prompt_tokens += chunk as u64;
            self.throughput.prefill_secs += started.elapsed().as_secs_f64();
            if done && a.seq.cached_tokens().len() >= SNAPSHOT_MIN_TOKENS {
                save(&mut self.cache, &mut self.cache_ops, &a.seq);
            }
        }
        Ok(())
    }

    /// One forward pass over every prefilled row that is still generating.
    fn decode(&mut self, model: &dyn LanguageModel, tok: &Tokenizer) -> Result<()> {
        let mut ready: Vec<&mut Active> = self
            .active
            .iter_mut()
            .filter(|a| a.seq.prefill_done() && !a.seq.ended())
            .collect();
        let slots: Vec<u64> = ready.iter().map(|a| a.seq.slot).collect();
        let current = match self.ahead.take() {
            // The same rows as last step: their tokens are already being computed.
            Some(ahead) if ahead.slots == slots => ahead.ids,
            Some(ahead) => {
                // The rows changed: take the queued tokens, then step the new set afresh.
                model.await_output()?;
                settle(&mut self.active, ahead, tok)?;
                return self.decode(model, tok);
            }
            None if ready.is_empty() => return Ok(()),
            None if !ready.iter().all(|a| a.seq.plain_greedy()) => {
                let (stats, drafter) = (&mut self.host_stats, self.drafter.as_ref());
                return host_step(model, &mut ready, tok, &mut self.cache_ops, stats, drafter);
            }
            None => {
                let ids: Vec<u32> = ready.iter().map(|a| a.seq.input).collect();
                let inputs = Array::from_slice(&ids, &[ids.len() as i32, 1]);
                let ops = std::mem::take(&mut self.cache_ops);
                let logprobs = last_logprobs(&forward(model, &inputs, &mut ready, ops)?)?;
                // The device's argmax is the sampler's greedy choice (the first maximum).
                argmax_axis(&logprobs, -1, false)?
            }
        };
        let queueing = model.queueing();
        if queueing != Queueing::HostIds {
            // Queue the next step before reading this one, so the device never waits for us.
            let inputs = current.reshape(&[slots.len() as i32, 1])?;
            let ops = std::mem::take(&mut self.cache_ops);
            let logits = forward(model, &inputs, &mut ready, ops)?;
            let next = argmax_axis(last_logprobs(&logits)?, -1, false)?;
            queueing.start(&next)?;
            self.ahead = Some(Ahead { slots, ids: next });
        }
        // Queued ahead, the next step's evaluation already computed `current`.
        current.eval()?;
        for (a, &id) in ready.into_iter().zip(current.as_slice::<u32>()) {
            a.push(tok, id, None)?;
        }
        Ok(())
    }

    /// Answers and removes the rows that ended (or whose client left).
    fn retire(&mut self, tok: &Tokenizer) -> Result<Vec<Summary>> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.active.len() {
            let a = &self.active[i];
            if !(a.seq.ended() || a.events.is_closed()) {
                i += 1;
                continue;
            }
            let a = self.active.remove(i);
            save(&mut self.cache, &mut self.cache_ops, &a.seq);
            self.cache_ops.push(CacheOp::Release { slot: a.seq.slot });
            let summary = a.seq.finish(tok)?;
            let _ = a.events.send(Ok(Event::Done(summary.clone())));
            done.push(summary);
        }
        Ok(done)
    }
}

impl Active {
    /// Takes this row's next token: its text goes to the client.
    fn push(&mut self, tok: &Tokenizer, id: u32, logprob: Option<TokenLogprob>) -> Result<()> {
        let events = &self.events;
        let mut send = |e| events.send(Ok(Event::Token(e))).is_ok();
        self.seq.push(tok, id, logprob, &mut send)
    }
}

/// One forward pass over the rows, each extending its own caches.
fn forward(
    model: &dyn LanguageModel,
    inputs: &Array,
    ready: &mut [&mut Active],
    cache_ops: Vec<CacheOp>,
) -> Result<Array> {
    let mut rows: Vec<Row> = ready
        .iter_mut()
        .map(|a| Row {
            slot: a.seq.slot,
            caches: &mut a.seq.caches,
        })
        .collect();
    model.forward_rows(inputs, &mut rows, cache_ops)
}

/// A step whose tokens the rows' samplers pick on the host: each row's input and its
/// proposals (padded to the longest, whose extra positions are dropped after), grammar
/// masks computed while the device runs it.
fn host_step(
    model: &dyn LanguageModel,
    ready: &mut [&mut Active],
    tok: &Tokenizer,
    cache_ops: &mut Vec<CacheOp>,
    stats: &mut HostStats,
    drafter: Option<&DraftModel>,
) -> Result<()> {
    let started = Instant::now();
    let drafts: Vec<Vec<u32>> = ready
        .iter_mut()
        .map(|a| a.seq.draft(drafter))
        .collect::<Result<_>>()?;
    let width = 1 + drafts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(ready.len() * width);
    for (a, d) in ready.iter().zip(&drafts) {
        ids.push(a.seq.input);
        ids.extend(d);
        ids.extend(std::iter::repeat_n(a.seq.input, width - 1 - d.len()));
    }
    let inputs = Array::from_slice(&ids, &[ready.len() as i32, width as i32]);
    let before: Vec<usize> = ready.iter().map(|a| a.seq.cached_len()).collect();
    let ops = std::mem::take(cache_ops);
    let logprobs = all_logprobs(&forward(model, &inputs, ready, ops)?)?;
    let step = HostStep {
        drafts: &drafts,
        width,
        before: &before,
    };
    let outcome = match ready.iter().all(|a| a.seq.device_greedy()) {
        true => verify_on_device(model, ready, &logprobs, tok, &step, cache_ops)?,
        false => sample_on_host(model, ready, &logprobs, tok, &step, cache_ops)?,
    };
    stats.grammar.add(outcome.masks, started);
    stats.speculation.add(&drafts, &outcome.taken);
    Ok(())
}

/// A host step's shape: each row's proposals, the positions each row ran (its input, then
/// its proposals and padding), and each row's cache length before it.
struct HostStep<'a> {
    drafts: &'a [Vec<u32>],
    width: usize,
    before: &'a [usize],
}

/// What a host step did: the host time grammars took (None: no row has one), and how many
/// proposals each row took.
struct HostOutcome {
    masks: Option<Duration>,
    taken: Vec<usize>,
}

/// Each row's own sampler picks from its log-probabilities on the host ([B, width, vocab]):
/// one token, or the proposals it takes and one more. The rows' grammar masks are computed
/// while the device computes the step: they need only the tokens taken. Positions past what
/// a row took are dropped, here and (through `ops`) on the other ranks.
fn sample_on_host(
    model: &dyn LanguageModel,
    ready: &mut [&mut Active],
    logprobs: &Array,
    tok: &Tokenizer,
    step: &HostStep,
    ops: &mut Vec<CacheOp>,
) -> Result<HostOutcome> {
    let logprobs = logprobs.as_dtype(Dtype::Float32)?;
    model.queueing().start(&logprobs)?;
    let started = Instant::now();
    let masks: Vec<Mask> = ready.iter_mut().map(|a| a.seq.mask()).collect();
    let mut spent = started.elapsed();
    model.await_output()?;
    logprobs.eval()?;
    let all = logprobs.as_slice::<f32>();
    let per_row = all.len() / ready.len();
    let vocab = per_row / step.width;
    let mut taken = Vec::with_capacity(ready.len());
    for (b, (a, mask)) in ready.iter_mut().zip(masks).enumerate() {
        let row = &all[b * per_row..(b + 1) * per_row];
        let drafts = &step.drafts[b];
        let chosen: Vec<(u32, Option<TokenLogprob>)> = match drafts.is_empty() {
            true => a
                .seq
                .choose(row[..vocab].to_vec(), mask)
                .into_iter()
                .collect(),
            false => a.seq.choose_drafted(row, vocab, drafts),
        };
        taken.push(chosen.len().saturating_sub(1));
        take(a, tok, chosen, (step, b), ops)?;
        spent += a.seq.take_grammar_time();
    }
    Ok(HostOutcome {
        masks: ready.iter().any(|a| a.seq.has_grammar()).then_some(spent),
        taken,
    })
}

/// A step whose rows are all greedy (`Sequence::device_greedy`): each position's token is
/// the device's argmax of its log-probabilities, the sampler's greedy choice as a plain
/// greedy step takes it, so only [B, width] ids come to the host. A row takes its proposals
/// while they equal the argmax before them, then the argmax after the last one taken.
fn verify_on_device(
    model: &dyn LanguageModel,
    ready: &mut [&mut Active],
    logprobs: &Array,
    tok: &Tokenizer,
    step: &HostStep,
    ops: &mut Vec<CacheOp>,
) -> Result<HostOutcome> {
    let ids = argmax_axis(logprobs, -1, false)?;
    model.queueing().start(&ids)?;
    model.await_output()?;
    ids.eval()?;
    let all = ids.as_slice::<u32>();
    let mut taken = Vec::with_capacity(ready.len());
    for (b, a) in ready.iter_mut().enumerate() {
        let row = &all[b * step.width..(b + 1) * step.width];
        let drafts = &step.drafts[b];
        let kept = drafts.iter().zip(row).take_while(|(d, id)| d == id).count();
        taken.push(kept);
        let chosen = row[..=kept].iter().map(|&id| (id, None)).collect();
        take(a, tok, chosen, (step, b), ops)?;
    }
    Ok(HostOutcome { masks: None, taken })
}

/// Row `b` of a host step takes its chosen tokens in order (until it ends), and drops the
/// positions past them, here and (through `ops`) on the other ranks.
fn take(
    a: &mut Active,
    tok: &Tokenizer,
    chosen: Vec<(u32, Option<TokenLogprob>)>,
    (step, b): (&HostStep, usize),
    ops: &mut Vec<CacheOp>,
) -> Result<()> {
    let valid = step.before[b] + chosen.len().max(1);
    a.seq
        .drafted(step.drafts[b].len(), chosen.len().saturating_sub(1));
    for (id, logprob) in chosen {
        if a.seq.ended() {
            break;
        }
        a.push(tok, id, logprob)?;
    }
    if step.width > 1 {
        if let Some(len) = a.seq.keep_positions(valid) {
            ops.push(CacheOp::Trim {
                slot: a.seq.slot,
                len,
            });
        }
    }
    Ok(())
}

/// Log-probabilities of every position of `logits` ([B, L, vocab], the same shape out).
fn all_logprobs(logits: &Array) -> Result<Array> {
    let shape = logits.shape().to_vec();
    let (b, l, vocab) = (shape[0], shape[1], shape[2]);
    let flat = logits.reshape(&[b * l, 1, vocab])?;
    Ok(last_logprobs(&flat)?.reshape(&[b, l, vocab])?)
}

/// What speculation did in the steps that proposed tokens: what GetMetrics reports.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Speculation {
    pub steps: u64,
    /// Proposals verified.
    pub drafted: u64,
    /// Proposals taken.
    pub accepted: u64,
}

impl Speculation {
    fn add(&mut self, drafts: &[Vec<u32>], taken: &[usize]) {
        let drafted: usize = drafts.iter().map(Vec::len).sum();
        if drafted > 0 {
            self.steps += 1;
            self.drafted += drafted as u64;
            self.accepted += taken.iter().sum::<usize>() as u64;
        }
    }
}

impl GrammarTime {
    /// Counts a step that began at `started`, if a grammar took `masks` of it.
    fn add(&mut self, masks: Option<Duration>, started: Instant) {
        if let Some(masks) = masks {
            self.steps += 1;
            self.mask_secs += masks.as_secs_f64();
            self.step_secs += started.elapsed().as_secs_f64();
        }
    }
}

/// Gives a queued step's tokens to the rows it ran for that are still generating (a row that
/// ended meanwhile drops its token; its cache holds one position more, which nothing reads).
fn settle(active: &mut [Active], ahead: Ahead, tok: &Tokenizer) -> Result<()> {
    ahead.ids.eval()?;
    for (slot, &id) in ahead.slots.iter().zip(ahead.ids.as_slice::<u32>()) {
        if let Some(a) = active
            .iter_mut()
            .find(|a| a.seq.slot == *slot && !a.seq.ended())
        {
            a.push(tok, id, None)?;
        }
    }
    Ok(())
}

/// Keeps a sequence's caches in the prefix cache, and queues the same for the other ranks.
fn save(cache: &mut PrefixCache, ops: &mut Vec<CacheOp>, seq: &Sequence) {
    let tokens = seq.cached_tokens();
    let inserted = cache.insert(tokens, &seq.caches);
    if let Some(entry) = inserted.id {
        ops.push(CacheOp::Save {
            slot: seq.slot,
            entry,
            len: tokens.len(),
        });
        let covered = inserted.covered.iter();
        ops.extend(covered.map(|&from| CacheOp::Adopt { entry, from }));
    }
    ops.extend(
        inserted
            .evicted
            .into_iter()
            .map(|entry| CacheOp::Evict { entry }),
    );
}

#[cfg(test)]
mod tests;
