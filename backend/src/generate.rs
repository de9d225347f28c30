//! One request's generation on one node: chunked prefill, then decode, as mlx-lm's
//! `generate_step` does it (all but the last prompt token in chunks, the last as a step).

use std::time::Instant;

use mlx_rs::ops::indexing::argmax_axis;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::logsumexp_axis;
use mlx_rs::{Array, Dtype};

use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::models::LanguageModel;
use crate::sampling::{Sampler, SamplingParams};
use crate::stopping::StopMatcher;
use crate::tokenizer::{Detokenizer, Tokenizer};

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Report each token's log-probability, with this many top alternatives.
    pub logprobs: Option<usize>,
    /// Prompt tokens per prefill forward pass.
    pub prefill_step: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prefill_step: 2048,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An eos token or a stop string.
    Stop,
    /// max_tokens reached.
    Length,
    /// The caller stopped listening.
    Cancelled,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// The most likely tokens at this position, best first.
    pub top: Vec<(u32, f32)>,
}

/// One generated token and the text it completes (possibly empty, held back or cut by a stop).
#[derive(Debug, Clone)]
pub struct TokenEvent {
    pub id: u32,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Time to the first token, the last prompt token's step included (as mlx-lm counts it).
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub finish: FinishReason,
    /// Text held back at the end (an incomplete character or a partial stop string).
    pub tail: String,
}

/// The last position's log-probabilities, lazily, in the model's dtype (as mlx-lm computes them).
fn logprobs_graph(
    model: &dyn LanguageModel,
    input: &Array,
    caches: &mut [KvCache],
) -> Result<Array> {
    let logits = model.forward(input, caches)?;
    let last = logits.index((.., -1, ..));
    Ok(last.subtract(logsumexp_axis(&last, -1, true)?)?)
}

/// Runs `ids` through the model and returns the last position's log-probabilities (f32, on the host).
pub fn step_logprobs(
    model: &dyn LanguageModel,
    ids: &[u32],
    caches: &mut [KvCache],
) -> Result<Vec<f32>> {
    let input = Array::from_slice(ids, &[1, ids.len() as i32]);
    let logprobs = logprobs_graph(model, &input, caches)?.as_dtype(Dtype::Float32)?;
    logprobs.eval()?;
    Ok(logprobs.as_slice::<f32>().to_vec())
}

/// Greedy decoding on the device, one step ahead: the next step is queued (`async_eval`)
/// before the host reads the current token, so the CPU stream never waits for the host.
struct GreedyPipeline {
    pending: Option<Array>,
}

impl GreedyPipeline {
    /// The greedy token after `input` ([1, 1] ids), lazily: argmax of log-probabilities, as mlx-lm.
    fn step(model: &dyn LanguageModel, input: &Array, caches: &mut [KvCache]) -> Result<Array> {
        Ok(argmax_axis(
            logprobs_graph(model, input, caches)?,
            -1,
            false,
        )?)
    }

    /// The token after `input`, with the one after it already queued.
    fn next(
        &mut self,
        model: &dyn LanguageModel,
        input: u32,
        caches: &mut [KvCache],
    ) -> Result<u32> {
        let current = match self.pending.take() {
            Some(a) => a,
            None => Self::step(model, &Array::from_slice(&[input], &[1, 1]), caches)?,
        };
        let ahead = Self::step(model, &current.reshape(&[1, 1])?, caches)?;
        mlx_rs::transforms::async_eval([&ahead])?;
        self.pending = Some(ahead);
        current
            .try_item_exact::<u32>()
            .map_err(|e| Error::Internal(format!("reading the sampled token: {e}")))
    }
}

/// Feeds prompt tokens through the caches without computing logits, in chunks.
pub fn prefill(
    model: &dyn LanguageModel,
    ids: &[u32],
    caches: &mut [KvCache],
    step: usize,
) -> Result<()> {
    for chunk in ids.chunks(step.max(1)) {
        let input = Array::from_slice(chunk, &[1, chunk.len() as i32]);
        model.prefill(&input, caches)?;
    }
    Ok(())
}

/// Generates from `prompt`, calling `on_token` for each token; it returns false to cancel.
pub fn generate(
    model: &dyn LanguageModel,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(TokenEvent) -> bool,
) -> Result<Summary> {
    let Some((&last, head)) = prompt.split_last() else {
        return Err(Error::InvalidRequest("the prompt is empty".into()));
    };
    let start = Instant::now();
    let mut caches: Vec<KvCache> = (0..model.num_layers()).map(|_| KvCache::new()).collect();
    let mut sampler = Sampler::new(opts.sampling.clone());
    let mut detok = Detokenizer::new();
    let mut stops = StopMatcher::new(opts.stop.clone());
    let mut history = prompt.to_vec();
    let mut summary = Summary {
        prompt_tokens: prompt.len(),
        generated_tokens: 0,
        prefill_secs: 0.0,
        decode_secs: 0.0,
        finish: FinishReason::Length,
        tail: String::new(),
    };

    prefill(model, head, &mut caches, opts.prefill_step)?;
    let mut input = last;
    let mut hit_stop_string = false;
    // Plain greedy needs no host-side processing, so it can run a step ahead on the device.
    let plain_greedy = opts.sampling.temperature <= 0.0
        && !opts.sampling.has_processors()
        && opts.logprobs.is_none()
        && model.lazy_inputs();
    let mut pipeline = plain_greedy.then_some(GreedyPipeline { pending: None });
    while summary.generated_tokens < opts.max_tokens {
        let (id, raw) = match pipeline.as_mut() {
            Some(p) => (p.next(model, input, &mut caches)?, None),
            None => {
                let mut logprobs = step_logprobs(model, &[input], &mut caches)?;
                let raw = opts.logprobs.map(|top| (logprobs.clone(), top));
                sampler.process(&mut logprobs, &history);
                (sampler.sample(&logprobs), raw)
            }
        };
        if summary.generated_tokens == 0 {
            summary.prefill_secs = start.elapsed().as_secs_f64();
        }
        if !opts.ignore_eos && tok.eos_ids().contains(&id) {
            summary.finish = FinishReason::Stop;
            break;
        }
        summary.generated_tokens += 1;
        history.push(id);
        let check = stops.push(&detok.push(tok, id)?);
        let logprob = raw.map(|(raw, top)| token_logprob(&raw, top, id));
        if !on_token(TokenEvent {
            id,
            text: check.emit,
            logprob,
        }) {
            summary.finish = FinishReason::Cancelled;
            break;
        }
        if check.stopped {
            summary.finish = FinishReason::Stop;
            hit_stop_string = true;
            break;
        }
        input = id;
    }
    summary.decode_secs = (start.elapsed().as_secs_f64() - summary.prefill_secs).max(0.0);
    if !hit_stop_string {
        let mut tail = stops.push(&detok.finish(tok)?).emit;
        tail.push_str(&stops.flush());
        summary.tail = tail;
    }
    Ok(summary)
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
