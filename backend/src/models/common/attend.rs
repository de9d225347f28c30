//! Attention of rotated queries over each row's KV cache: what standard attention and
//! DeepSeek-V2's expanded latent attention share once their keys and values are made.

use mlx_rs::fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask};
use mlx_rs::ops::concatenate;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::Array;

use super::layers::cpu_f32;
use crate::cache::KvCache;
use crate::error::Result;

/// The head layout one attention block attends with, on this rank.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub heads: i32,
    pub kv_heads: i32,
    pub scale: f32,
}

impl Heads {
    /// Appends this step's `keys`/`values` ([B, kv_heads, L, d]) to each row's cache and
    /// attends `queries` ([B, heads, L, d]) over them; [B, heads, L, dv] out (a key head may
    /// be wider than a value head: DeepSeek's rope part).
    pub fn attend(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        match caches {
            [cache] => {
                let (keys, values) = cache.update_and_fetch(keys, values)?;
                match decode_on_cpu(queries) {
                    true => self.attend_decode(queries, &[(keys, values)]),
                    false => self.attend_one(queries, &keys, &values),
                }
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
        // Metal's fused kernel skips masked keys itself.
        if len <= QUERY_BLOCK || cfg!(target_os = "macos") {
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
                queries, keys, values, self.scale,
            )?);
        }
        let mask = causal.then_some(ScaledDotProductAttentionMask::Causal);
        Ok(scaled_dot_product_attention(
            queries, keys, values, self.scale, mask, None,
        )?)
    }
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
