//! Attention of rotated queries over each row's KV cache: what standard attention and
//! DeepSeek-V2's expanded latent attention share once their keys and values are made.

use mlx_rs::fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, concatenate, quantized_matmul, select, softmax_axes};
use mlx_rs::Array;

use super::layers::cpu_f32;
use crate::cache::{KvCache, Stored};
use crate::error::Result;
use crate::weights::Numerics;

/// The head layout one attention block attends with, on this rank.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub heads: i32,
    pub kv_heads: i32,
    pub scale: f32,
    /// A sliding layer's window: each query sees itself and the `window - 1` positions before.
    pub window: Option<i32>,
    /// The weights' numerics: `Int8` also takes its own prefill attention on the CPU
    /// (`quant_cpu::fast::causal_attention`).
    pub numerics: Numerics,
}

impl Heads {
    /// Appends this step's `keys`/`values` ([B, kv_heads, L, d]) to each row's cache and
    /// attends `queries` ([B, heads, L, d]) over them; [B, heads, L, dv] out (a key head may
    /// be wider than a value head: DeepSeek's rope part). `sinks` ([heads]) join each
    /// softmax as one more logit per head (gpt-oss).
    pub fn attend(
        &self,
        (queries, keys, values): (&Array, &Array, &Array),
        caches: &mut [&mut KvCache],
        sinks: Option<&Array>,
    ) -> Result<Array> {
        if let Some(sinks) = sinks {
            return self.attend_with_sinks((queries, keys, values), caches, sinks);
        }
        if caches.iter().any(|c| c.format().quantizes()) {
            return self.attend_quantizing(queries, keys, values, caches);
        }
        match caches {
            [cache] => {
                let (keys, values) = cache.update_and_fetch(keys, values)?;
                self.attend_alone(queries, keys, values)
            }
            rows => {
                let n = rows.len() as i32;
                let (ks, vs) = (keys.split_equal(n, 0)?, values.split_equal(n, 0)?);
                for (r, cache) in rows.iter_mut().enumerate() {
                    cache.update(&ks[r], &vs[r])?;
                }
                if decode_on_cpu(queries) {
                    let kv = rows
                        .iter()
                        .map(|cache| cache.fetch())
                        .collect::<Result<Vec<_>>>()?;
                    return self.attend_decode(queries, &kv);
                }
                self.attend_each(queries, rows)
            }
        }
    }

    /// Each row through MLX's attention with `sinks` (none of the one-node CPU kernels takes
    /// them; on the CPU MLX computes them op by op, as mlx-lm does), over its own cache: the
    /// window's mask where a query would see past it, else causal for a chunk. A quantized
    /// cache cannot take sinks (mlx-lm refuses it too).
    fn attend_with_sinks(
        &self,
        (queries, keys, values): (&Array, &Array, &Array),
        caches: &mut [&mut KvCache],
        sinks: &Array,
    ) -> Result<Array> {
        if caches.iter().any(|c| c.format().quantizes()) {
            return Err(crate::error::Error::InvalidRequest(
                "a quantized KV cache is not supported with attention sinks (gpt-oss; mlx-lm's \
                 quantized attention cannot take them either): use cache type f16 or bf16"
                    .into(),
            ));
        }
        let n = caches.len() as i32;
        let split = |x: &Array| -> Result<Vec<Array>> {
            match n {
                1 => Ok(vec![x.clone()]),
                _ => Ok(x.split_equal(n, 0)?),
            }
        };
        let (qs, ks, vs) = (split(queries)?, split(keys)?, split(values)?);
        let mut outs = Vec::with_capacity(caches.len());
        for (r, cache) in caches.iter_mut().enumerate() {
            let (k, v) = cache.update_and_fetch(&ks[r], &vs[r])?;
            let len = qs[r].shape()[2];
            let window = self.window_mask(len, k.shape()[2])?;
            let mask = match (&window, len > 1) {
                (Some(m), _) => Some(ScaledDotProductAttentionMask::Array(m)),
                (None, true) => Some(ScaledDotProductAttentionMask::Causal),
                (None, false) => None,
            };
            outs.push(scaled_dot_product_attention(
                &qs[r],
                &k,
                &v,
                self.scale,
                mask,
                Some(sinks),
            )?);
        }
        Ok(match n {
            1 => outs.remove(0),
            _ => concatenate(&outs, 0)?,
        })
    }

    /// Rows whose caches quantize, each on its own: a quantized cache through
    /// [`Self::attend_quantized`], one still in full precision (before `quantized_start`)
    /// attended as usual. (A cast cache takes the shared path: it reads back dense.)
    fn attend_quantizing(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        let n = caches.len() as i32;
        let split = |x: &Array| -> Result<Vec<Array>> {
            match n {
                1 => Ok(vec![x.clone()]),
                _ => Ok(x.split_equal(n, 0)?),
            }
        };
        let (qs, ks, vs) = (split(queries)?, split(keys)?, split(values)?);
        let mut outs = Vec::with_capacity(caches.len());
        for (r, cache) in caches.iter_mut().enumerate() {
            cache.update(&ks[r], &vs[r])?;
            outs.push(match cache.holds_quantized() {
                true => self.attend_quantized(&qs[r], &cache.fetch_stored()?)?,
                false => {
                    let (k, v) = cache.fetch()?;
                    self.attend_alone(&qs[r], k, v)?
                }
            });
        }
        Ok(match n {
            1 => outs.remove(0),
            _ => concatenate(&outs, 0)?,
        })
    }

    /// mlx-lm's `quantized_scaled_dot_product_attention`, op for op: the queries scaled and
    /// grouped by KV head, scores through `quantized_matmul`, a causal mask over a chunk, a
    /// precise softmax, then the values through `quantized_matmul` (a dense side by matmul).
    fn attend_quantized(
        &self,
        queries: &Array,
        (keys, values): &(Stored, Stored),
    ) -> Result<Array> {
        let s = queries.shape();
        let (b, heads, l, d) = (s[0], s[1], s[2], s[3]);
        let repeats = heads / self.kv_heads;
        let mut q = queries.multiply(Array::from_f32(self.scale))?;
        if repeats > 1 {
            q = q.reshape(&[b, self.kv_heads, repeats, l, d])?;
        }
        let mut scores = product(&q, keys, true, repeats > 1)?;
        if l > 1 {
            let seen = scores.shape()[scores.ndim() - 1];
            let rows = arange::<i32, i32>(seen - l, seen, None)?.reshape(&[-1, 1])?;
            let cols = arange::<i32, i32>(None, seen, None)?.reshape(&[1, -1])?;
            scores = select(rows.ge(&cols)?, &scores, Array::from_f32(f32::MIN))?;
        }
        let weights = softmax_axes(&scores, &[-1], true)?;
        let out = product(&weights, values, false, repeats > 1)?;
        Ok(match repeats > 1 {
            true => out.reshape(&[b, heads, l, -1])?,
            false => out,
        })
    }

    /// One sequence's queries over its dense keys and values: the one-node decode attention
    /// for one f32 position on the CPU, else [`Self::attend_one`].
    fn attend_alone(&self, queries: &Array, keys: Array, values: Array) -> Result<Array> {
        match decode_on_cpu(queries) {
            true => self.attend_decode(queries, &[(keys, values)]),
            false => self.attend_one(queries, &keys, &values),
        }
    }

    /// One query position per row over each row's own cache, as one CPU node with the bits
    /// of [`Self::attend_each`] (`quant_cpu::fast::decode_attention`).
    fn attend_decode(&self, queries: &Array, kv: &[(Array, Array)]) -> Result<Array> {
        let rows: Vec<(&Array, &Array)> = kv.iter().map(|(k, v)| (k, v)).collect();
        Ok(quant_cpu::fast::decode_attention(
            queries, &rows, self.scale,
        )?)
    }

    /// One sequence's attention ([1, heads, L, d]) over all its cached keys and values.
    fn attend_one(&self, queries: &Array, keys: &Array, values: &Array) -> Result<Array> {
        let len = queries.shape()[2];
        if let Some(mask) = self.window_mask(len, keys.shape()[2])? {
            let mask = ScaledDotProductAttentionMask::Array(&mask);
            return Ok(scaled_dot_product_attention(
                queries,
                keys,
                values,
                self.scale,
                Some(mask),
                None,
            )?);
        }
        // Metal's fused kernel skips masked keys itself, and so does the int8 numerics' node.
        let own = quant_cpu::fast::own_causal_attention(self.numerics)
            && cpu_f32(queries)
            && queries.shape()[0] == 1;
        let skips = cfg!(target_os = "macos") || own;
        if len <= QUERY_BLOCK || skips {
            return self.sdpa(queries, keys, values);
        }
        // Unfused (CPU) attention scores and softmaxes every key for every query; a block of
        // queries needs only the keys up to its last one, which halves a long prefill's work.
        let past = keys.shape()[2] - len;
        let blocks = (0..len)
            .step_by(QUERY_BLOCK as usize)
            .map(|start| {
                let end = (start + QUERY_BLOCK).min(len);
                let seen = past + end;
                self.sdpa(
                    &queries.index((.., .., start..end, ..)),
                    &keys.index((.., .., ..seen, ..)),
                    &values.index((.., .., ..seen, ..)),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&blocks, 2)?)
    }

    /// A sliding layer's mask for `len` queries over `seen` keys (the queries last), where
    /// some query would otherwise see past its window; mlx-lm masks exactly then
    /// (`create_causal_mask` with `window_size`), and attends causally otherwise.
    fn window_mask(&self, len: i32, seen: i32) -> Result<Option<Array>> {
        let Some(window) = self.window else {
            return Ok(None);
        };
        if len < 2 || seen <= window {
            return Ok(None);
        }
        let rows = arange::<i32, i32>(seen - len, seen, None)?.reshape(&[-1, 1])?;
        let cols = arange::<i32, i32>(None, seen, None)?.reshape(&[1, -1])?;
        let causal = rows.ge(&cols)?;
        let near = rows.lt(cols.add(Array::from_int(window))?)?;
        Ok(Some(causal.logical_and(&near)?))
    }

    /// Each row of a decode batch over its own (updated) cache, one by one: where the
    /// one-node decode attention does not run (Metal, bf16).
    fn attend_each(&self, queries: &Array, rows: &[&mut KvCache]) -> Result<Array> {
        let qs = queries.split_equal(rows.len() as i32, 0)?;
        let outs = rows
            .iter()
            .zip(&qs)
            .map(|(cache, q)| {
                let (k, v) = cache.fetch()?;
                self.sdpa(q, &k, &v)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&outs, 0)?)
    }

    /// MLX's attention of rotated queries over all cached keys and values (causal for prefill:
    /// one CPU node with its bits for one f32 sequence, `quant_cpu::fast::causal_attention`).
    fn sdpa(&self, queries: &Array, keys: &Array, values: &Array) -> Result<Array> {
        let causal = queries.shape()[2] > 1;
        if causal && cpu_f32(queries) && queries.shape()[0] == 1 {
            return Ok(quant_cpu::fast::causal_attention(
                queries,
                keys,
                values,
                self.scale,
                self.numerics,
            )?);
        }
        let mask = causal.then_some(ScaledDotProductAttentionMask::Causal);
        Ok(scaled_dot_product_attention(
            queries, keys, values, self.scale, mask, None,
        )?)
    }
}

/// `x` times one side of a cache (transposed for keys), grouped by KV head where `grouped`.
fn product(x: &Array, side: &Stored, transpose: bool, grouped: bool) -> Result<Array> {
    let group = |a: &Array| -> Result<Array> {
        match grouped {
            true => Ok(a.expand_dims(-3)?),
            false => Ok(a.clone()),
        }
    };
    Ok(match side {
        Stored::Dense(a) => match transpose {
            true => x.matmul(group(a)?.swap_axes(-1, -2)?)?,
            false => x.matmul(group(a)?)?,
        },
        Stored::Affine {
            codes,
            scales,
            biases,
            bits,
            group_size,
        } => quantized_matmul(
            x,
            group(codes)?,
            group(scales)?,
            &group(biases)?,
            transpose,
            *group_size,
            *bits,
        )?,
    })
}

/// Whether a step takes the one-node decode attention: one query position per row, f32 on
/// the CPU (Metal keeps MLX's fused kernel).
fn decode_on_cpu(queries: &Array) -> bool {
    cpu_f32(queries) && queries.shape()[2] == 1
}

/// Queries per block of a long causal attention on CPU (see [`Heads::attend_one`]).
const QUERY_BLOCK: i32 = 128;

/// Each row's cached positions before this step: where its rope starts.
pub fn offsets(caches: &[&mut KvCache]) -> Vec<i32> {
    caches.iter().map(|c| c.offset()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{KvEncoding, KvFormat};
    use mlx_rs::ops::{dequantize, quantize};

    fn array(shape: &[i32], seed: f32) -> Array {
        let n: i32 = shape.iter().product();
        let x: Vec<f32> = (0..n).map(|i| ((i as f32 + seed) * 0.731).sin()).collect();
        Array::from_slice(&x, shape)
    }

    /// MLX's quantize then dequantize: what attention over the codes must equal.
    fn round_trip(x: &Array, bits: i32) -> Result<Array> {
        let (codes, scales, biases) = quantize(x, 32, bits)?;
        Ok(dequantize(&codes, &scales, &biases, 32, bits)?)
    }

    fn max_difference(a: &Array, b: &Array) -> Result<f32> {
        Ok(a.subtract(b)?.abs()?.max(None)?.item_exact::<f32>())
    }

    /// Sinks join each head's softmax as one more logit with no value: a chunk (causal) and
    /// then a decode step equal that softmax written out, one query head per KV head here.
    #[test]
    fn sinks_join_the_softmax_as_a_logit_without_a_value() -> Result<()> {
        let heads = Heads {
            heads: 2,
            kv_heads: 2,
            scale: 0.25,
            window: None,
            numerics: Numerics::Exact,
        };
        let sinks = Array::from_slice(&[0.5f32, -1.0], &[2]);
        let mut cache = KvCache::new();
        let (mut all_k, mut all_v) = (Vec::new(), Vec::new());
        for (len, seed) in [(3, 0.0), (1, 50.0)] {
            let q = array(&[1, 2, len, 16], seed);
            let (k, v) = (
                array(&[1, 2, len, 16], seed + 1.0),
                array(&[1, 2, len, 16], seed + 2.0),
            );
            let ours = heads.attend((&q, &k, &v), &mut [&mut cache], Some(&sinks))?;
            all_k.push(k);
            all_v.push(v);
            let (k, v) = (concatenate(&all_k, 2)?, concatenate(&all_v, 2)?);
            let seen = k.shape()[2];
            let mut scores = q
                .multiply(Array::from_f32(0.25))?
                .matmul(k.swap_axes(-1, -2)?)?;
            if len > 1 {
                let rows = arange::<i32, i32>(seen - len, seen, None)?.reshape(&[-1, 1])?;
                let cols = arange::<i32, i32>(None, seen, None)?.reshape(&[1, -1])?;
                scores = select(rows.ge(&cols)?, &scores, Array::from_f32(f32::NEG_INFINITY))?;
            }
            let sink = mlx_rs::ops::broadcast_to(sinks.reshape(&[1, 2, 1, 1])?, &[1, 2, len, 1])?;
            let weights = softmax_axes(&concatenate(&[sink, scores], -1)?, &[-1], true)?;
            let want = weights.index((.., .., .., 1..)).matmul(&v)?;
            let diff = max_difference(&ours, &want)?;
            assert!(diff < 1e-5, "{len} positions: {diff}");
        }
        Ok(())
    }

    /// A chunk (causal) and then a decode step, over a cache of 8-bit and of 4-bit codes, equal
    /// plain attention over the codes' dequantized keys and values (grouped query heads).
    #[test]
    fn attention_over_codes_equals_attention_over_their_dequantization() -> Result<()> {
        let heads = Heads {
            heads: 6,
            kv_heads: 2,
            scale: 0.125,
            window: None,
            numerics: Numerics::Exact,
        };
        for bits in [8, 4] {
            let enc = KvEncoding::Affine { bits };
            let format = KvFormat {
                keys: enc,
                values: enc,
                group_size: 32,
                quantized_start: 0,
            };
            let (mut codes, mut plain) = (KvCache::with_format(format), KvCache::new());
            for (len, seed) in [(5, 0.0), (1, 100.0)] {
                let q = array(&[1, 6, len, 64], seed);
                let (k, v) = (
                    array(&[1, 2, len, 64], seed + 1.0),
                    array(&[1, 2, len, 64], seed + 2.0),
                );
                let ours = heads.attend((&q, &k, &v), &mut [&mut codes], None)?;
                let (k, v) = (round_trip(&k, bits)?, round_trip(&v, bits)?);
                let want = heads.attend((&q, &k, &v), &mut [&mut plain], None)?;
                assert_eq!(ours.shape(), want.shape());
                let diff = max_difference(&ours, &want)?;
                assert!(diff < 1e-5, "{bits} bits, {len} positions: {diff}");
            }
        }
        Ok(())
    }
}
