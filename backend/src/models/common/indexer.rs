//! DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a lightning indexer scores every cached
//! key for each query and latent attention attends only to the `index_topk` best, op for op as
//! mlx-lm's `deepseek_v32` (its `Indexer` and the sparse branch of its attention).
//!
//! The indexer's key ([index_head_dim] a position) is cached beside the latent attention's, at
//! the end of each position's rope key part (the cache's value side), so prefix sharing,
//! trimming and batching keep both caches at one offset. Every rank keeps the indexer whole
//! (its heads are not cut in tensor mode): its score is a sum over all its heads in mlx-lm's
//! order, and any other order (partial sums added over ranks) could pick another key where two
//! scores tie, so a sharded model would not give the single node's tokens.

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{argpartition_axis, broadcast_to, matmul, maximum, zeros};
use mlx_rs::{fast, Array};

use super::{LatentAttention, Linear, Rope};
use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::weights::Weights;

/// mlx-lm's `nn.LayerNorm` default epsilon (the indexer's key norm).
const K_NORM_EPS: f32 = 1e-5;

/// The indexer's sizes, from the family's config.
#[derive(Debug, Clone, Copy)]
pub struct IndexerConfig {
    pub hidden_size: i32,
    pub q_lora_rank: i32,
    /// `index_n_heads`
    pub heads: i32,
    /// `index_head_dim` (its first `qk_rope_head_dim` dims rotate)
    pub head_dim: i32,
    /// `index_topk`: the keys each query keeps; at least as many keys attend densely.
    pub topk: i32,
}

/// The lightning indexer: its own queries from the query latent, one key a position (normed by
/// a LayerNorm), and a weight per head and query.
pub struct Indexer {
    wq_b: Linear,
    wk: Linear,
    k_norm: (Array, Array),
    weights_proj: Linear,
    rope: Rope,
    c: IndexerConfig,
}

/// One step's indexer projections, for the whole batch.
pub struct IndexStep {
    /// [B, heads, L, head_dim], rotated
    pub q: Array,
    /// [B, 1, L, head_dim], normed and rotated
    pub k: Array,
    /// [B, heads, L, 1]: each head's weight, scaled by `(heads * head_dim)^-0.5`
    pub weights: Array,
}

impl Indexer {
    /// Loads `{prefix}` (`{attn}.indexer`) whole, whatever the tensor cut. `rope` rotates the
    /// first `qk_rope_head_dim` dims of each head (mlx-lm's `indexer_rope_interleave` pairs).
    pub fn load(w: &mut Weights, prefix: &str, c: &IndexerConfig, rope: Rope) -> Result<Indexer> {
        if rope.scales_input() {
            return Err(Error::Config(
                "rope_scaling: YaRN with mscale unlike mscale_all_dim scales the indexer's \
                 partial rope, which is not implemented yet"
                    .into(),
            ));
        }
        let key = |name: &str| format!("{prefix}.{name}");
        let (d, h) = (c.head_dim, c.heads);
        let norm =
            |w: &mut Weights, part: &str| w.take_float(&key(&format!("k_norm.{part}")), &[d]);
        Ok(Indexer {
            wq_b: Linear::load(w, &key("wq_b"), c.q_lora_rank, h * d, false)?,
            wk: Linear::load(w, &key("wk"), c.hidden_size, d, false)?,
            k_norm: (norm(w, "weight")?, norm(w, "bias")?),
            weights_proj: Linear::load(w, &key("weights_proj"), c.hidden_size, h, false)?,
            rope,
            c: *c,
        })
    }

    /// Width of the key it caches a position.
    pub fn key_width(&self) -> i32 {
        self.c.head_dim
    }

    /// Queries from the query latent `qr` ([B, L, q_lora_rank]), keys and head weights from
    /// the layer's input `x` ([B, L, hidden]), each row rotated from its own offset.
    pub fn project(&self, x: &Array, qr: &Array, offsets: &[i32]) -> Result<IndexStep> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let (h, d) = (self.c.heads, self.c.head_dim);
        let q = self
            .wq_b
            .forward(qr)?
            .reshape(&[b, l, h, d])?
            .swap_axes(1, 2)?;
        let (weight, bias) = &self.k_norm;
        let k = fast::layer_norm(self.wk.forward(x)?, weight, bias, K_NORM_EPS)?;
        let k = k.reshape(&[b, 1, l, d])?;
        let scale = (f64::from(h).powf(-0.5) * f64::from(d).powf(-0.5)) as f32;
        let weights = self.weights_proj.forward(x)?;
        let weights = weights.multiply(Array::from_f32(scale).as_dtype(weights.dtype())?)?;
        Ok(IndexStep {
            q: self.rope.for_rows(&q, offsets)?,
            k: self.rope.for_rows(&k, offsets)?,
            weights: weights.swap_axes(-1, -2)?.expand_dims(-1)?,
        })
    }

    /// One sequence's picks: the `index_topk` keys ([1, 1, L, topk], in MLX's partition order)
    /// of each query of `q` ([1, heads, L, D]) over all cached `keys` ([1, 1, T, D]), or `None`
    /// when there are no more keys than that (dense attention). `causal` ([L, T]) hides a
    /// prefill chunk's later keys. Scores are ReLU(q k^T) times each head's weight, summed over
    /// heads one by one in a chunk and by MLX's reduction in a decode step, as mlx-lm sums them.
    pub fn select(
        &self,
        (q, weights): (&Array, &Array),
        keys: &Array,
        causal: Option<&Array>,
    ) -> Result<Option<Array>> {
        let t = keys.shape()[2];
        if t <= self.c.topk {
            return Ok(None);
        }
        let scores = matmul(q, keys.swap_axes(-1, -2)?)?;
        let zero = Array::from_f32(0.0).as_dtype(scores.dtype())?;
        let scores = maximum(&scores, &zero)?.multiply(weights)?;
        let scores = match q.shape()[2] {
            1 => scores.sum_axis(1, true)?,
            _ => {
                (0..self.c.heads).try_fold(zero, |sum, h| sum.add(scores.index((.., h..h + 1))))?
            }
        };
        let scores = match causal {
            Some(mask) => {
                let hidden = Array::from_f32(f32::NEG_INFINITY).as_dtype(scores.dtype())?;
                mlx_rs::ops::select(mask, &scores, &hidden)?
            }
            None => scores,
        };
        let kth = t - self.c.topk;
        Ok(Some(argpartition_axis(&scores, kth, -1)?.index((
            ..,
            ..,
            ..,
            kth..,
        ))))
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.wq_b.arrays();
        out.extend(self.wk.arrays());
        out.extend([&self.k_norm.0, &self.k_norm.1]);
        out.extend(self.weights_proj.arrays());
        out
    }
}

/// `cached` ([1, 1, T, width]) at the picked positions `picks` ([1, 1, 1, topk]): a decode
/// step's keys, in the order the picks come (mlx-lm's `take_along_axis`).
pub fn gather(cached: &Array, picks: &Array) -> Result<Array> {
    let idx = picks.index((.., .., 0, ..)).expand_dims(-1)?;
    let mut shape = idx.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = cached.shape()[3];
    }
    Ok(cached.take_along_axis(broadcast_to(&idx, &shape)?, 2)?)
}

/// A prefill chunk's mask ([1, 1, L, T]): the picked keys `picks` ([1, 1, L, topk]) that
/// `causal` ([L, T]) lets each query see.
pub fn picked_mask(picks: &Array, causal: &Array) -> Result<Array> {
    let mut shape = picks.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = causal.shape()[1];
    }
    let none = zeros::<bool>(&shape)?;
    let sparse = none.put_along_axis(picks, Array::from_bool(true), -1)?;
    Ok(sparse.logical_and(causal)?)
}

/// A DSA layer's attention: latent attention and the indexer that picks its keys.
pub struct SparseLatentAttention {
    pub attention: LatentAttention,
    pub indexer: Indexer,
}

impl SparseLatentAttention {
    pub fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        self.attention.forward_sparse(x, caches, &self.indexer)
    }

    /// Elements one position adds to this layer's cache on this rank: the latent, the rope
    /// key and the indexer's key.
    pub fn kv_elements(&self) -> usize {
        self.attention.kv_elements() + self.indexer.key_width() as usize
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.attention.arrays();
        out.extend(self.indexer.arrays());
        out
    }
}
