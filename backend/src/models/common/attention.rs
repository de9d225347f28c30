//! Multi-head attention with grouped KV heads, optional q/k norms and q/k/v biases.

use mlx_rs::fast::{scaled_dot_product_attention, ScaledDotProductAttentionMask};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{concatenate, matmul, softmax_axis};
use mlx_rs::{Array, Dtype};

use super::{Linear, RmsNorm, Rope, Split, TensorSplit};
use crate::cache::KvCache;
use crate::error::Result;
use crate::weights::Weights;

/// The shape of one attention block, from the family's config.
#[derive(Debug, Clone, Copy)]
pub struct AttentionConfig {
    pub hidden_size: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    /// Biases on q/k/v (Qwen2, Llama with attention_bias).
    pub qkv_bias: bool,
    /// Bias on o (Llama with attention_bias).
    pub o_bias: bool,
    /// RMS norms on each head of q and k (Qwen3).
    pub qk_norm: bool,
    pub rms_norm_eps: f32,
}

pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    /// Heads on this rank (all of them, unless tensor-parallel).
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    scale: f32,
    tensor: Option<TensorSplit>,
}

impl Attention {
    /// Loads q/k/v cut by output and o by input when `tensor` is set: each rank keeps
    /// 1/size of the heads and KV heads, and o's partial outputs are summed over ranks.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        c: &AttentionConfig,
        tensor: &Option<TensorSplit>,
    ) -> Result<Attention> {
        let (q_out, kv_out) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let n = tensor.as_ref().map_or(1, |t| t.size as i32);
        let (rows, cols) = (Split::rows(tensor), Split::cols(tensor));
        let norm = |w: &mut Weights, name: &str| match c.qk_norm {
            true => w
                .rms_norm(&format!("{prefix}.{name}"), c.head_dim, c.rms_norm_eps)
                .map(Some),
            false => Ok(None),
        };
        Ok(Attention {
            q_proj: w.linear_split(
                &format!("{prefix}.q_proj"),
                c.hidden_size,
                q_out,
                c.qkv_bias,
                rows,
            )?,
            k_proj: w.linear_split(
                &format!("{prefix}.k_proj"),
                c.hidden_size,
                kv_out,
                c.qkv_bias,
                rows,
            )?,
            v_proj: w.linear_split(
                &format!("{prefix}.v_proj"),
                c.hidden_size,
                kv_out,
                c.qkv_bias,
                rows,
            )?,
            o_proj: w.linear_split(
                &format!("{prefix}.o_proj"),
                q_out,
                c.hidden_size,
                c.o_bias,
                cols,
            )?,
            q_norm: norm(w, "q_norm")?,
            k_norm: norm(w, "k_norm")?,
            heads: c.heads / n,
            kv_heads: c.kv_heads / n,
            head_dim: c.head_dim,
            scale: (c.head_dim as f32).powf(-0.5),
            tensor: tensor.clone(),
        })
    }

    /// `x`: [B, L, hidden]; row b appends its keys and values to `caches[b]` (rows of a
    /// batch decode one token each, L = 1).
    pub fn forward(&self, x: &Array, rope: &Rope, caches: &mut [&mut KvCache]) -> Result<Array> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let heads = |y: Array, n: i32, norm: &Option<RmsNorm>| -> Result<Array> {
            let y = y.reshape(&[b, l, n, -1])?;
            let y = match norm {
                Some(norm) => norm.forward(&y)?,
                None => y,
            };
            Ok(y.transpose_axes(&[0, 2, 1, 3])?)
        };
        let queries = heads(self.q_proj.forward(x)?, self.heads, &self.q_norm)?;
        let keys = heads(self.k_proj.forward(x)?, self.kv_heads, &self.k_norm)?;
        let values = heads(self.v_proj.forward(x)?, self.kv_heads, &None)?;
        let out = match caches {
            [cache] => {
                let offset = cache.offset();
                let queries = rope.forward(&queries, offset)?;
                let keys = rope.forward(&keys, offset)?;
                self.attend(&queries, &keys, &values, cache)?
            }
            rows => {
                // One rope for the batch, each row from its own position.
                let offsets: Vec<i32> = rows.iter().map(|c| c.offset()).collect();
                let queries = rope.forward_rows(&queries, &offsets)?;
                let keys = rope.forward_rows(&keys, &offsets)?;
                let n = rows.len() as i32;
                let (ks, vs) = (keys.split_equal(n, 0)?, values.split_equal(n, 0)?);
                for (r, cache) in rows.iter_mut().enumerate() {
                    cache.update(&ks[r], &vs[r])?;
                }
                match padded_is_exact(&queries) {
                    true => self.attend_padded(&queries, rows)?,
                    false => self.attend_each(&queries, rows)?,
                }
            }
        };
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        TensorSplit::all_sum(&self.tensor, self.o_proj.forward(&out)?)
    }

    /// Each row of a decode batch over its own (updated) cache, one by one (exact everywhere).
    fn attend_each(&self, queries: &Array, rows: &[&mut KvCache]) -> Result<Array> {
        let qs = queries.split_equal(rows.len() as i32, 0)?;
        let outs = rows
            .iter()
            .zip(&qs)
            .map(|(cache, q)| {
                let (k, v) = cache.padded(cache.offset())?;
                self.sdpa(q, &k, &v)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&outs, 0)?)
    }

    /// A decode batch in one attention over its (updated) caches, each padded to the longest
    /// row and masked. Bit-identical to [`Self::attend`] per row where [`padded_is_exact`] holds.
    fn attend_padded(&self, queries: &Array, rows: &[&mut KvCache]) -> Result<Array> {
        let n = rows.len() as i32;
        let lens: Vec<i32> = rows.iter().map(|c| c.offset()).collect();
        let longest = lens.iter().copied().max().unwrap_or(0);
        let (mut all_k, mut all_v) = (Vec::new(), Vec::new());
        for cache in rows.iter() {
            let (k, v) = cache.padded(longest)?;
            all_k.push(k);
            all_v.push(v);
        }
        let (keys, values) = (concatenate(&all_k, 0)?, concatenate(&all_v, 0)?);
        // Queries [B, heads, 1, D] as [B, kv_heads, repeats, D]: each KV head's query rows.
        let q = queries
            .multiply(Array::from_f32(self.scale).as_dtype(queries.dtype())?)?
            .reshape(&[n, self.kv_heads, self.heads / self.kv_heads, self.head_dim])?;
        let scores = matmul(&q, keys.swap_axes(-1, -2)?)?;
        let scores = scores.add(padding_mask(&lens, longest)?.as_dtype(scores.dtype())?)?;
        let out = matmul(softmax_axis(&scores, -1, true)?, &values)?;
        Ok(out.reshape(&[n, self.heads, 1, self.head_dim])?)
    }

    /// One sequence's attention ([1, heads, L, head_dim], rotated) over its cache, extended
    /// by this step.
    fn attend(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        cache: &mut KvCache,
    ) -> Result<Array> {
        let (keys, values) = cache.update_and_fetch(keys, values)?;
        let len = queries.shape()[2];
        // Metal's fused kernel skips masked keys itself.
        if len <= QUERY_BLOCK || cfg!(target_os = "macos") {
            return self.sdpa(queries, &keys, &values);
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

    /// MLX's attention of rotated queries over all cached keys and values (causal for prefill).
    fn sdpa(&self, queries: &Array, keys: &Array, values: &Array) -> Result<Array> {
        let mask = (queries.shape()[2] > 1).then_some(ScaledDotProductAttentionMask::Causal);
        Ok(scaled_dot_product_attention(
            queries, keys, values, self.scale, mask, None,
        )?)
    }

    /// Keys and values one position adds to the cache on this rank, in elements.
    pub fn kv_elements(&self) -> usize {
        2 * (self.kv_heads * self.head_dim) as usize
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let norms = [&self.q_norm, &self.k_norm]
            .into_iter()
            .flatten()
            .map(|n| &n.weight);
        [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj]
            .into_iter()
            .flat_map(Linear::arrays)
            .chain(norms)
            .collect()
    }
}

/// Queries per block of a long causal attention on CPU (see [`Attention::attend`]).
const QUERY_BLOCK: i32 = 128;

/// Whether a padded batch attention gives each row the same bits as attending alone: on
/// x86-64 with f32 activations, where both products run skinny-gemm's kernels (each output a
/// fixed-order chain, so masked zero terms add nothing) and MLX's CPU softmax sums in order.
fn padded_is_exact(queries: &Array) -> bool {
    cfg!(target_arch = "x86_64") && queries.dtype() == Dtype::Float32 && skinny_gemm::active()
}

/// [B, 1, 1, longest]: 0 for a row's cached positions, -inf past its length.
fn padding_mask(lens: &[i32], longest: i32) -> Result<Array> {
    let mask: Vec<f32> = lens
        .iter()
        .flat_map(|&len| (0..longest).map(move |t| if t < len { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Array::from_slice(
        &mask,
        &[lens.len() as i32, 1, 1, longest],
    ))
}
