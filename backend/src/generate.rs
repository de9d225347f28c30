//! One request's generation on one node: chunked prefill, then decode, as mlx-lm's
//! `generate_step` does it (all but the last prompt token in chunks, the last as a step).

use mlx_rs::ops::indexing::argmax_axis;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::logsumexp_axis;
use mlx_rs::{Array, Dtype};

use crate::cache::LayerCache;
use crate::error::{Error, Result};
use crate::models::common::cpu_f32;
use crate::models::{LanguageModel, Queueing};
use crate::request::{GenerateOptions, Summary, TokenEvent};
use crate::sequence::Sequence;
use crate::tokenizer::Tokenizer;

/// Logits [B, L, vocab] to the last position's log-probabilities [B, vocab], lazily, in the
/// model's dtype (as mlx-lm computes them). f32 on the CPU takes the one-node log-sum-exp with
/// vectorized exps (MLX's bits).
pub fn last_logprobs(logits: &Array) -> Result<Array> {
    let last = logits.index((.., -1, ..));
    let lse = match cpu_f32(&last) {
        true => quant_cpu::fast::logsumexp(&last)?,
        false => logsumexp_axis(&last, -1, true)?,
    };
    Ok(last.subtract(lse)?)
}

fn logprobs_graph(
    model: &dyn LanguageModel,
    input: &Array,
    caches: &mut [LayerCache],
) -> Result<Array> {
    last_logprobs(&model.forward(input, caches)?)
}

/// Runs `ids` through the model and returns the last position's log-probabilities (f32, on the host).
pub fn step_logprobs(
    model: &dyn LanguageModel,
    ids: &[u32],
    caches: &mut [LayerCache],
) -> Result<Vec<f32>> {
    let input = Array::from_slice(ids, &[1, ids.len() as i32]);
    let logprobs = logprobs_graph(model, &input, caches)?.as_dtype(Dtype::Float32)?;
    model.await_output()?;
    logprobs.eval()?;
    Ok(logprobs.as_slice::<f32>().to_vec())
}

/// Greedy decoding on the device, one step ahead: the next step is queued (`Queueing`)
/// before the host reads the current token, so the CPU stream never waits for the host.
struct GreedyPipeline {
    pending: Option<Array>,
}

impl GreedyPipeline {
    /// The greedy token after `input` ([1, 1] ids), lazily: argmax of log-probabilities, as mlx-lm.
    fn step(model: &dyn LanguageModel, input: &Array, caches: &mut [LayerCache]) -> Result<Array> {
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
        caches: &mut [LayerCache],
    ) -> Result<u32> {
        let current = match self.pending.take() {
            Some(a) => a,
            None => Self::step(model, &Array::from_slice(&[input], &[1, 1]), caches)?,
        };
        let ahead = Self::step(model, &current.reshape(&[1, 1])?, caches)?;
        model.queueing().start(&ahead)?;
        self.pending = Some(ahead);
        current
            .try_item_exact::<u32>()
            .map_err(|e| Error::Internal(format!("reading the sampled token: {e}")))
    }

    /// Waits for the step queued ahead, which nobody will read: work left in flight would
    /// outlive the caller's arrays and run into the process's exit (see `lifecycle`).
    fn drain(self, model: &dyn LanguageModel) -> Result<()> {
        match self.pending {
            Some(ahead) => {
                model.await_output()?;
                Ok(ahead.eval()?)
            }
            None => Ok(()),
        }
    }
}

/// Generates from `prompt`, calling `on_token` for each token; it returns false to cancel.
pub fn generate(
    model: &dyn LanguageModel,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(TokenEvent) -> bool,
) -> Result<Summary> {
    let mut seq = Sequence::new(0, prompt, opts.clone(), model.new_caches())?;
    while !seq.prefill_chunk(model, &mut Vec::new())? {}
    let mut pipeline = (seq.plain_greedy() && model.queueing() != Queueing::HostIds)
        .then_some(GreedyPipeline { pending: None });
    while !seq.ended() {
        let (id, logprob) = match pipeline.as_mut() {
            Some(p) => (p.next(model, seq.input, &mut seq.caches)?, None),
            None => {
                let mask = seq.mask();
                let logprobs = step_logprobs(model, &[seq.input], &mut seq.caches)?;
                match seq.choose(logprobs, mask) {
                    Some(chosen) => chosen,
                    None => break,
                }
            }
        };
        seq.push(tok, id, logprob, &mut on_token)?;
    }
    let summary = seq.finish(tok)?;
    pipeline.map_or(Ok(()), |p| p.drain(model))?;
    Ok(summary)
}
