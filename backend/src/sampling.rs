//! The sampler chain, on rank 0's host: logit bias and penalties, then temperature with
//! top-k, top-p and min-p filters, drawn from a seeded generator so a seed reproduces.

use std::collections::HashMap;

/// Sampling parameters of one request; `temperature == 0` is greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// 0 means off.
    pub top_k: usize,
    pub min_p: f32,
    /// 1 means off; applied over the last `penalty_context` tokens, as mlx-lm does.
    pub repetition_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub penalty_context: usize,
    pub logit_bias: HashMap<u32, f32>,
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_context: 20,
            logit_bias: HashMap::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Whether any logits processor changes the model's logits.
    pub fn has_processors(&self) -> bool {
        !self.logit_bias.is_empty()
            || self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
    }
}

/// A seeded sampler; one per request.
pub struct Sampler {
    params: SamplingParams,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        Sampler {
            params,
            rng: SplitMix64(seed),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Applies the logits processors in place; `history` is prompt plus generated ids.
    pub fn process(&self, logprobs: &mut [f32], history: &[u32]) {
        let p = &self.params;
        if !p.has_processors() {
            return;
        }
        for (&id, &bias) in &p.logit_bias {
            if let Some(l) = logprobs.get_mut(id as usize) {
                *l += bias;
            }
        }
        let window = &history[history.len().saturating_sub(p.penalty_context)..];
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &id in window {
            *counts.entry(id).or_default() += 1;
        }
        for (id, n) in counts {
            let Some(l) = logprobs.get_mut(id as usize) else {
                continue;
            };
            if p.repetition_penalty != 1.0 {
                *l = if *l < 0.0 {
                    *l * p.repetition_penalty
                } else {
                    *l / p.repetition_penalty
                };
            }
            *l -= p.presence_penalty + p.frequency_penalty * n as f32;
        }
    }

    /// Picks the next token from (processed) log-probabilities.
    pub fn sample(&mut self, logprobs: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logprobs);
        }
        let dist = self.distribution(logprobs);
        self.draw(&dist)
    }

    /// Whether to take `draft` (proposed with certainty: prompt lookup) where the model gives
    /// these (processed) log-probabilities, by the standard speculative rule: greedy takes it
    /// if it is the argmax; sampling takes it with its probability, and otherwise draws from
    /// the distribution without it. The token to emit, and whether it was the draft.
    pub fn verify(&mut self, logprobs: &[f32], draft: u32) -> (u32, bool) {
        if self.params.temperature <= 0.0 {
            let best = argmax(logprobs);
            return (best, best == draft);
        }
        let mut dist = self.distribution(logprobs);
        let total: f32 = dist.iter().map(|x| x.1).sum();
        let weight = dist.iter().find(|x| x.0 == draft).map_or(0.0, |x| x.1);
        if self.rng.next_f32() * total < weight {
            return (draft, true);
        }
        dist.retain(|x| x.0 != draft);
        match dist.is_empty() {
            true => (draft, true),
            false => (self.draw(&dist), false),
        }
    }

    /// The tokens sampling may pick and their weights (in proportion to their probabilities):
    /// temperature, then top-k, min-p and top-p. Only what a filter keeps is sorted (most
    /// likely first, then by id), so a step never sorts the whole vocabulary: a sort of 49k
    /// weights took about a third of a SmolLM2-135M step.
    fn distribution(&self, logprobs: &[f32]) -> Vec<(u32, f32)> {
        let p = &self.params;
        let max = logprobs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f32)> = logprobs
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, ((l - max) / p.temperature).exp()))
            .filter(|(_, w)| *w > 0.0)
            .collect();
        let likelier = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < probs.len() {
            probs.select_nth_unstable_by(p.top_k - 1, likelier);
            probs.truncate(p.top_k);
        }
        let total: f32 = probs.iter().map(|x| x.1).sum();
        if p.min_p > 0.0 {
            // The most likely token weighs exp(0) = 1.
            probs.retain(|x| x.1 >= p.min_p);
        }
        if p.top_p < 1.0 {
            // Tokens this light cannot reach the top-p set: together they weigh less than
            // the 1 - top_p it leaves out, and every heavier token comes before them.
            let light = (1.0 - p.top_p) * total / probs.len().max(1) as f32;
            probs.retain(|x| x.1 >= light);
            probs.sort_unstable_by(likelier);
            let (mut acc, mut keep) = (0.0, 0);
            for (i, x) in probs.iter().enumerate() {
                acc += x.1 / total;
                keep = i + 1;
                if acc >= p.top_p {
                    break;
                }
            }
            probs.truncate(keep.max(1));
        } else if p.top_k > 0 {
            probs.sort_unstable_by(likelier);
        }
        probs
    }

    /// One token from a distribution (weights, in proportion).
    fn draw(&mut self, probs: &[(u32, f32)]) -> u32 {
        let total: f32 = probs.iter().map(|x| x.1).sum();
        let mut target = self.rng.next_f32() * total;
        for (id, w) in probs {
            target -= w;
            if target <= 0.0 {
                return *id;
            }
        }
        probs.last().map_or(0, |x| x.0)
    }
}

/// Index of the largest value, the first one on ties (as MLX's argmax).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// A small, fast, seedable generator; the same seed gives the same draws on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![0.1, 2.0, -1.0, 1.9, 0.5]
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample(&logits()), 1);
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
    }

    #[test]
    fn same_seed_same_draws() {
        let params = SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..Default::default()
        };
        let draw = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone());
            (0..50).map(|_| s.sample(&logits())).collect::<Vec<_>>()
        };
        assert_eq!(draw(&params), draw(&params));
        let other = SamplingParams {
            seed: Some(8),
            ..params.clone()
        };
        assert_ne!(draw(&params), draw(&other));
    }

    /// The speculative rule keeps the model's distribution: a draft is taken as often as the
    /// model would pick it, and the rest of the time the other tokens come in proportion.
    #[test]
    fn verifying_a_draft_keeps_the_distribution() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            seed: Some(11),
            ..Default::default()
        });
        let lp = logits();
        let max = lp.iter().copied().fold(f32::MIN, f32::max);
        let weights: Vec<f32> = lp.iter().map(|l| (l - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        let n = 200_000;
        let mut counts = [0usize; 5];
        for _ in 0..n {
            let (id, taken) = s.verify(&lp, 3);
            assert_eq!(taken, id == 3);
            counts[id as usize] += 1;
        }
        for (id, &c) in counts.iter().enumerate() {
            let expected = weights[id] / total;
            let got = c as f32 / n as f32;
            assert!(
                (got - expected).abs() < 0.005,
                "{id}: {got} against {expected}"
            );
        }
        let mut greedy = Sampler::new(SamplingParams::default());
        assert_eq!(greedy.verify(&lp, 1), (1, true));
        assert_eq!(greedy.verify(&lp, 3), (1, false));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 5.0,
            top_k: 1,
            seed: Some(1),
            ..Default::default()
        });
        assert!((0..20).all(|_| s.sample(&logits()) == 1));
    }

    #[test]
    fn min_p_and_top_p_filter_the_tail() {
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 0.5,
            seed: Some(3),
            ..Default::default()
        };
        let mut s = Sampler::new(params);
        assert!((0..50).all(|_| [1, 3].contains(&s.sample(&logits()))));
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            min_p: 0.5,
            seed: Some(3),
            ..Default::default()
        });
        assert!((0..50).all(|_| [1, 3].contains(&s.sample(&logits()))));
    }

    #[test]
    fn bias_and_penalties_change_logits() {
        let params = SamplingParams {
            logit_bias: HashMap::from([(0, 10.0)]),
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            ..Default::default()
        };
        let s = Sampler::new(params);
        let mut l = logits();
        s.process(&mut l, &[1, 2]);
        assert_eq!(l[0], 10.1);
        assert_eq!(l[1], 2.0 / 2.0 - 0.5);
        assert_eq!(l[2], -2.0 - 0.5);
    }
}
