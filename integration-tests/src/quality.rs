//! How far one way of computing a model's next-token distributions is from another, over
//! natural English prose: the quality gate of a faster numerics mode (`cpu_numerics:int8`)
//! against the exact one, and of quantized weights against the bf16 model.
//!
//! The prose is Debian's GPL-3 text (`base-files` puts it on every machine): not the model's
//! own prompts. Both models read the same tokens, teacher-forced; the candidate in chunks of
//! [`CHUNK`] positions (a chunk's products take the few-row kernels, as decode steps do).

use backend::cache::LayerCache;
use backend::loader::LoadedModel;
use mlx_rs::Array;

use crate::TestResult;

/// The prose every gate reads.
pub const PROSE: &str = "/usr/share/common-licenses/GPL-3";
/// Positions a forward pass of the candidate takes: at most `quant_kernels::PANEL_ROWS`, so
/// that a chunk runs the kernels a decode step runs.
pub const CHUNK: usize = 16;
/// Positions a forward pass of the reference takes (a multiple of [`CHUNK`]).
pub const REFERENCE_CHUNK: usize = 128;

/// The gate's measures of `candidate` against `reference` over the same positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    /// Positions compared (each predicts the token after it).
    pub positions: usize,
    /// Mean KL(reference ‖ candidate) of the next-token distributions, in nats.
    pub mean_kld: f64,
    /// The 99th percentile of the per-position KL divergence.
    pub p99_kld: f64,
    /// Positions where both rank the same token first, as a fraction.
    pub top1: f64,
    /// Perplexity of the prose under the reference and under the candidate.
    pub ppl: (f64, f64),
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} positions: mean KLD {:.3e} nats (p99 {:.3e}), top-1 agreement {:.2}%, \
             perplexity {:.3} -> {:.3}",
            self.positions,
            self.mean_kld,
            self.p99_kld,
            100.0 * self.top1,
            self.ppl.0,
            self.ppl.1
        )
    }
}

/// The first `positions + 1` tokens of the prose.
pub fn prose_ids(m: &LoadedModel, positions: usize) -> TestResult<Vec<u32>> {
    let text = std::fs::read_to_string(PROSE)?;
    let mut ids = m.tokenizer.encode(&text)?;
    if ids.len() <= positions {
        return Err(format!(
            "{PROSE} has {} tokens; the gate reads {positions}",
            ids.len()
        )
        .into());
    }
    ids.truncate(positions + 1);
    Ok(ids)
}

/// The gate's measures of `candidate` against `reference` over `ids` (from [`prose_ids`]):
/// the reference reads [`REFERENCE_CHUNK`] positions at a time, the candidate the same ones
/// [`CHUNK`] at a time, each model with its own caches.
pub fn gate(reference: &LoadedModel, candidate: &LoadedModel, ids: &[u32]) -> TestResult<Gate> {
    gate_in(reference, candidate, ids, REFERENCE_CHUNK)
}

/// [`gate`] with the reference also reading [`CHUNK`] positions a pass: two runs of the
/// integer path against each other.
pub fn gate_both_chunked(
    reference: &LoadedModel,
    candidate: &LoadedModel,
    ids: &[u32],
) -> TestResult<Gate> {
    gate_in(reference, candidate, ids, CHUNK)
}

/// The gate with the reference reading `reference_chunk` positions a pass (a multiple of
/// [`CHUNK`]).
fn gate_in(
    reference: &LoadedModel,
    candidate: &LoadedModel,
    ids: &[u32],
    reference_chunk: usize,
) -> TestResult<Gate> {
    let mut caches = (reference.model.new_caches(), candidate.model.new_caches());
    let mut tally = Tally::default();
    let inputs = &ids[..ids.len() - 1];
    for (r, span) in inputs.chunks(reference_chunk).enumerate() {
        let p = log_probs(reference, span, &mut caches.0)?;
        let vocab = p.len() / span.len();
        for (c, chunk) in span.chunks(CHUNK).enumerate() {
            let q = log_probs(candidate, chunk, &mut caches.1)?;
            let at = r * reference_chunk + c * CHUNK;
            let p = &p[c * CHUNK * vocab..(c * CHUNK + chunk.len()) * vocab];
            let rows = p.chunks_exact(vocab).zip(q.chunks_exact(vocab));
            for ((p, q), &next) in rows.zip(&ids[at + 1..]) {
                tally.add(p, q, next as usize);
            }
        }
    }
    Ok(tally.gate())
}

/// Log-probabilities of the next token at each position of `chunk`, `[len * vocab]`.
fn log_probs(m: &LoadedModel, chunk: &[u32], caches: &mut [LayerCache]) -> TestResult<Vec<f32>> {
    let input = Array::from_slice(chunk, &[1, chunk.len() as i32]);
    let logits = m.model.forward(&input, caches)?;
    let lp = mlx_rs::nn::log_softmax(&logits.as_dtype(mlx_rs::Dtype::Float32)?, -1)?;
    lp.eval()?;
    Ok(lp.as_slice::<f32>().to_vec())
}

/// The running sums of a gate.
#[derive(Default)]
struct Tally {
    klds: Vec<f64>,
    same: usize,
    nll: (f64, f64),
}

impl Tally {
    /// One position: both models' log-probabilities and the token that came next.
    fn add(&mut self, p: &[f32], q: &[f32], next: usize) {
        self.klds.push(kld(p, q));
        self.same += usize::from(argmax(p) == argmax(q));
        self.nll.0 -= f64::from(p[next]);
        self.nll.1 -= f64::from(q[next]);
    }

    fn gate(mut self) -> Gate {
        let positions = self.klds.len().max(1);
        let mean_kld = self.klds.iter().sum::<f64>() / positions as f64;
        self.klds.sort_by(f64::total_cmp);
        let p99 = self.klds.get(positions * 99 / 100).or(self.klds.last());
        Gate {
            positions: self.klds.len(),
            mean_kld,
            p99_kld: p99.copied().unwrap_or(0.0),
            top1: self.same as f64 / positions as f64,
            ppl: (
                (self.nll.0 / positions as f64).exp(),
                (self.nll.1 / positions as f64).exp(),
            ),
        }
    }
}

fn argmax(v: &[f32]) -> usize {
    let best = v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1));
    best.map_or(0, |(i, _)| i)
}

/// KL(p ‖ q) from log-probabilities, in f64.
fn kld(p: &[f32], q: &[f32]) -> f64 {
    p.iter()
        .zip(q)
        .map(|(&lp, &lq)| {
            let (lp, lq) = (f64::from(lp), f64::from(lq));
            lp.exp() * (lp - lq)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_distributions_agree_and_differ_by_nothing() {
        let lp = [(0.7f32).ln(), (0.2f32).ln(), (0.1f32).ln()];
        let mut t = Tally::default();
        for next in [1, 0, 2, 1] {
            t.add(&lp, &lp, next);
        }
        let g = t.gate();
        assert_eq!((g.mean_kld, g.top1, g.positions), (0.0, 1.0, 4));
        assert!((g.ppl.0 - g.ppl.1).abs() < 1e-12);
    }

    #[test]
    fn kld_is_the_textbook_one() {
        let (p, q) = ([0.5f64, 0.5], [0.9f64, 0.1]);
        let want: f64 = p.iter().zip(q).map(|(p, q)| p * (p / q).ln()).sum();
        let lp: Vec<f32> = p.iter().map(|v| v.ln() as f32).collect();
        let lq: Vec<f32> = q.iter().map(|v| v.ln() as f32).collect();
        assert!((kld(&lp, &lq) - want).abs() < 1e-6);
    }
}
