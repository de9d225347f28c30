//! DeepSeek's multi-head latent attention (MLA): keys and values come from a low-rank latent
//! and a shared rotary key part. Every version caches the latent itself (kv_lora_rank + rope
//! dims a position, not each head's keys and values) and folds the expansion into the queries
//! and outputs, as mlx-lm's `deepseek_v3` does; mlx-lm's `deepseek_v2` expands and caches full
//! keys and values, which is the same attention (within rounding) at ~9x the cache.

use mlx_rs::fast::scaled_dot_product_attention;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, concatenate, ge, matmul};
use mlx_rs::Array;

use super::attend::offsets;
use super::attention::query_temperature;
use super::indexer::{gather, picked_mask, IndexStep, Indexer};
use super::shape::QueryScaling;
use super::{Linear, RmsNorm, Rope, TensorCut};
use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::weights::{Cut, MatrixWeight, QuantizedMatrix, Shape, Weights};

/// MLA's sizes, from the family's config.
#[derive(Debug, Clone, Copy)]
pub struct LatentConfig {
    pub hidden_size: i32,
    pub heads: i32,
    pub q_lora_rank: Option<i32>,
    pub kv_lora_rank: i32,
    pub qk_rope_head_dim: i32,
    pub qk_nope_head_dim: i32,
    pub v_head_dim: i32,
    pub attention_bias: bool,
    /// Softmax scale (YaRN's `mscale_all_dim` folded in by the family).
    pub scale: f32,
    /// The epsilon of the norms on the query and key-value latents (DeepSeek fixes it at 1e-6
    /// whatever the config says; GLM-4.7-Flash takes `rms_norm_eps`).
    pub norm_eps: f32,
}

impl LatentConfig {
    fn q_head_dim(&self) -> i32 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// Queries straight from the input, or through a low-rank bottleneck with its own norm.
enum QueryProj {
    Direct(Linear),
    LowRank {
        q_a_proj: Linear,
        q_a_layernorm: RmsNorm,
        q_b_proj: Linear,
    },
}

pub struct LatentAttention {
    q: QueryProj,
    kv_a_proj_with_mqa: Linear,
    kv_a_layernorm: RmsNorm,
    /// Each head's no-rope key part, as mlx-lm's `embed_q` ([heads, kv_lora_rank, nope]).
    embed_q: MultiLinear,
    /// Each head's value part, as mlx-lm's `unembed_out` ([heads, v_head_dim, kv_lora_rank]).
    unembed_out: MultiLinear,
    o_proj: Linear,
    rope: Rope,
    c: LatentConfig,
    /// Heads on this rank.
    heads: i32,
    tensor: Option<TensorCut>,
    /// A temperature on the whole rotated query by position (Mistral 4's Llama 4 scaling).
    query_scaling: QueryScaling,
}

impl LatentAttention {
    /// Loads `{prefix}.*`; tensor-parallel, each rank keeps 1/size of the heads (queries,
    /// the latent's expansion, the output's inputs) and the latent projection whole.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        c: &LatentConfig,
        rope: &Rope,
        tensor: &Option<TensorCut>,
    ) -> Result<LatentAttention> {
        let n = tensor.as_ref().map_or(1, |t| t.size as i32);
        let rows = Cut::rows(tensor);
        let key = |name: &str| format!("{prefix}.{name}");
        let q_out = c.heads * c.q_head_dim();
        let q = match c.q_lora_rank {
            None => QueryProj::Direct(Linear::load_split(
                w,
                &key("q_proj"),
                c.hidden_size,
                q_out,
                false,
                rows,
            )?),
            Some(rank) => QueryProj::LowRank {
                q_a_proj: Linear::load(w, &key("q_a_proj"), c.hidden_size, rank, c.attention_bias)?,
                q_a_layernorm: RmsNorm::load(w, &key("q_a_layernorm"), rank, c.norm_eps)?,
                q_b_proj: Linear::load_split(w, &key("q_b_proj"), rank, q_out, false, rows)?,
            },
        };
        let latent = c.kv_lora_rank + c.qk_rope_head_dim;
        let (embed_q, unembed_out) = expansion(w, prefix, c, tensor)?;
        Ok(LatentAttention {
            q,
            kv_a_proj_with_mqa: Linear::load(
                w,
                &key("kv_a_proj_with_mqa"),
                c.hidden_size,
                latent,
                c.attention_bias,
            )?,
            kv_a_layernorm: RmsNorm::load(w, &key("kv_a_layernorm"), c.kv_lora_rank, c.norm_eps)?,
            embed_q,
            unembed_out,
            o_proj: Linear::load_split(
                w,
                &key("o_proj"),
                c.heads * c.v_head_dim,
                c.hidden_size,
                c.attention_bias,
                Cut::cols(tensor),
            )?,
            rope: rope.clone(),
            c: *c,
            heads: c.heads / n,
            tensor: tensor.clone(),
            query_scaling: QueryScaling::None,
        })
    }

    /// The same block with Llama 4's query temperature on both query parts after rope, as
    /// mlx-lm's `mistral4` scales them.
    pub fn with_query_scaling(self, query_scaling: QueryScaling) -> LatentAttention {
        LatentAttention {
            query_scaling,
            ..self
        }
    }

    /// `x`: [B, L, hidden]; row b extends `caches[b]` (rows of a batch decode one token each).
    pub fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let (nope, rope_dim) = (self.c.qk_nope_head_dim, self.c.qk_rope_head_dim);
        let q = self
            .queries(x)?
            .reshape(&[b, l, self.heads, -1])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let offsets = offsets(caches);
        let q_nope = q.index((.., .., .., ..nope));
        let q_pe = self
            .rope
            .for_rows(&q.index((.., .., .., nope..)), &offsets)?;
        let q_nope = query_temperature(self.query_scaling, &q_nope, &offsets)?;
        let q_pe = query_temperature(self.query_scaling, &q_pe, &offsets)?;
        let compressed = self.kv_a_proj_with_mqa.forward(x)?;
        let latent =
            self.kv_a_layernorm
                .forward(&compressed.index((.., .., ..self.c.kv_lora_rank)))?;
        let k_pe = compressed
            .index((.., .., self.c.kv_lora_rank..))
            .reshape(&[b, l, 1, rope_dim])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let k_pe = self.rope.for_rows(&k_pe, &offsets)?;
        let parts = Parts {
            q_nope,
            q_pe,
            latent,
            k_pe,
        };
        let out = self.attend(parts, caches)?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        TensorCut::all_sum(&self.tensor, self.o_proj.forward(&out)?)
    }

    fn queries(&self, x: &Array) -> Result<Array> {
        match &self.q {
            QueryProj::Direct(q_proj) => q_proj.forward(x),
            QueryProj::LowRank {
                q_a_proj,
                q_a_layernorm,
                q_b_proj,
            } => q_b_proj.forward(&q_a_layernorm.forward(&q_a_proj.forward(x)?)?),
        }
    }

    /// The latent and the rope key part are cached (not each head's keys and values); each
    /// row of a decode batch attends on its own.
    fn attend(&self, p: Parts, caches: &mut [&mut KvCache]) -> Result<Array> {
        let latent = p.latent.expand_dims(1)?;
        if let [cache] = caches {
            return self.attend_latent(&p.q_nope, &p.q_pe, (&latent, &p.k_pe), cache);
        }
        let n = caches.len() as i32;
        let split = |a: &Array| a.split_equal(n, 0);
        let (qn, qp) = (split(&p.q_nope)?, split(&p.q_pe)?);
        let (lat, kp) = (split(&latent)?, split(&p.k_pe)?);
        let outs = caches
            .iter_mut()
            .enumerate()
            .map(|(r, cache)| self.attend_latent(&qn[r], &qp[r], (&lat[r], &kp[r]), cache))
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&outs, 0)?)
    }

    /// One sequence: scores are the latent part (through `embed_q`) plus the rope part,
    /// passed to MLX's attention as an additive mask, exactly as mlx-lm does.
    fn attend_latent(
        &self,
        q_nope: &Array,
        q_pe: &Array,
        (latent, k_pe): (&Array, &Array),
        cache: &mut KvCache,
    ) -> Result<Array> {
        let (offset, l) = (cache.offset(), q_nope.shape()[2]);
        let (latent, k_pe) = cache.update_and_fetch(latent, k_pe)?;
        let scale = Array::from_f32(self.c.scale).as_dtype(q_pe.dtype())?;
        let mut pe_scores = matmul(q_pe.multiply(&scale)?, k_pe.swap_axes(-1, -2)?)?;
        if l > 1 {
            let lowest = Array::from_f32(f32::MIN).as_dtype(pe_scores.dtype())?;
            pe_scores = mlx_rs::ops::select(&causal_mask(l, offset)?, &pe_scores, &lowest)?;
        }
        let sdpa = |q: &Array, k: &Array, v: &Array| {
            scaled_dot_product_attention(q, k, v, self.c.scale, &pe_scores, None)
        };
        if l == 1 {
            let q = self.embed_q.forward(q_nope, true)?;
            return self.unembed_out.forward(&sdpa(&q, &latent, &latent)?, true);
        }
        let k = self.embed_q.forward(&latent, false)?;
        let v = self.unembed_out.forward(&latent, true)?;
        Ok(sdpa(q_nope, &k, &v)?)
    }

    /// Elements one position adds to this layer's cache on this rank (the latent and the
    /// rope key, whatever the heads).
    pub fn kv_elements(&self) -> usize {
        (self.c.kv_lora_rank + self.c.qk_rope_head_dim) as usize
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = match &self.q {
            QueryProj::Direct(q) => q.arrays(),
            QueryProj::LowRank {
                q_a_proj,
                q_a_layernorm,
                q_b_proj,
            } => {
                let mut v = q_a_proj.arrays();
                v.push(&q_a_layernorm.weight);
                v.extend(q_b_proj.arrays());
                v
            }
        };
        out.extend(self.kv_a_proj_with_mqa.arrays());
        out.push(&self.kv_a_layernorm.weight);
        out.extend(self.embed_q.arrays());
        out.extend(self.unembed_out.arrays());
        out.extend(self.o_proj.arrays());
        out
    }
}

/// This step's projections, before the caches.
struct Parts {
    /// [B, heads, L, nope]
    q_nope: Array,
    /// [B, heads, L, rope], rotated
    q_pe: Array,
    /// [B, L, kv_lora_rank], normed
    latent: Array,
    /// [B, 1, L, rope], rotated
    k_pe: Array,
}

/// [L, offset + L]: query i (at position offset + i) sees keys up to its own position.
fn causal_mask(l: i32, offset: i32) -> Result<Array> {
    let keys = arange::<_, i32>(0, offset + l, 1)?.reshape(&[1, -1])?;
    let queries = arange::<_, i32>(offset, offset + l, 1)?.reshape(&[-1, 1])?;
    Ok(ge(&queries, &keys)?)
}

/// `embed_q` and `unembed_out` for this rank's heads: stored as such (DeepSeek-V3 as mlx-lm
/// converts it now), or sliced out of `kv_b_proj` (DeepSeek-V2, and V3 converted before mlx-lm
/// cached the latent): its rows are each head's no-rope key part, then its value part. The
/// slices are used as they are, in the orientation they are stored in (quantized along the
/// latent), so nothing is requantized.
fn expansion(
    w: &mut Weights,
    prefix: &str,
    c: &LatentConfig,
    tensor: &Option<TensorCut>,
) -> Result<(MultiLinear, MultiLinear)> {
    let kv_b = format!("{prefix}.kv_b_proj");
    if !w.contains(&format!("{kv_b}.weight")) {
        let heads = Cut::stacked(tensor);
        let mut load = |name: &str, rows: i32, cols: i32| {
            let shape = Shape::stacked(c.heads, rows, cols);
            MultiLinear::load(w, &format!("{prefix}.{name}"), shape, heads, false)
        };
        let embed_q = load("embed_q", c.kv_lora_rank, c.qk_nope_head_dim)?;
        return Ok((embed_q, load("unembed_out", c.v_head_dim, c.kv_lora_rank)?));
    }
    let (nope, v) = (c.qk_nope_head_dim, c.v_head_dim);
    let shape = Shape::matrix(c.heads * (nope + v), c.kv_lora_rank);
    let whole = MultiWeight::of(w.matrix(&kv_b, shape, Cut::Whole)?)?;
    let n = tensor.as_ref().map_or(1, |t| t.size as i32);
    let first = tensor.as_ref().map_or(0, |t| t.rank as i32) * (c.heads / n);
    let heads = first..first + c.heads / n;
    let part = |rows: std::ops::Range<i32>| {
        whole.map(|a| {
            let per_head = a.reshape(&[c.heads, nope + v, -1])?;
            Ok(per_head
                .index((heads.clone(), rows.clone(), ..))
                .contiguous()?)
        })
    };
    // The key rows are embed_q transposed; the value rows are unembed_out as it is.
    let embed_q = MultiLinear {
        weight: part(0..nope)?,
        transposed: true,
    };
    let unembed_out = MultiLinear {
        weight: part(nope..nope + v)?,
        transposed: false,
    };
    Ok((embed_q, unembed_out))
}

/// One matrix per head, `[heads, out, in]`, as mlx-lm's `MultiLinear`; `transposed` when
/// stored as `[heads, in, out]` (slices of `kv_b_proj`).
pub struct MultiLinear {
    weight: MultiWeight,
    transposed: bool,
}

/// A stack of matrices, dense or as stored (MLX's quantized matmul over the stack).
enum MultiWeight {
    Dense(Array),
    Quantized(QuantizedMatrix),
}

impl MultiWeight {
    /// In the f32 modes the matrices are dequantized (they are small beside the experts, and
    /// `quant-cpu` has no batched per-head product).
    fn of(m: MatrixWeight) -> Result<MultiWeight> {
        Ok(match m {
            MatrixWeight::Dense(weight) => MultiWeight::Dense(weight),
            MatrixWeight::Quantized(matrix) => MultiWeight::Quantized(matrix),
            MatrixWeight::Packed(p) => MultiWeight::Dense(p.dequantize_f32()?),
        })
    }

    /// The same reshaping or slicing applied to every array (codes, scales and biases alike:
    /// they share the leading axes).
    fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<MultiWeight> {
        Ok(match self {
            MultiWeight::Dense(a) => MultiWeight::Dense(f(a)?),
            MultiWeight::Quantized(matrix) => MultiWeight::Quantized(matrix.map(f)?),
        })
    }
}

impl MultiLinear {
    fn load(
        w: &mut Weights,
        prefix: &str,
        shape: Shape,
        split: Cut,
        transposed: bool,
    ) -> Result<MultiLinear> {
        Ok(MultiLinear {
            weight: MultiWeight::of(w.matrix(prefix, shape, split)?)?,
            transposed,
        })
    }

    /// `x @ W^T` per head (`transpose`), or `x @ W`, for W as mlx-lm orients it.
    fn forward(&self, x: &Array, transpose: bool) -> Result<Array> {
        let transpose = transpose != self.transposed;
        match &self.weight {
            MultiWeight::Dense(weight) => match transpose {
                true => Ok(matmul(x, weight.swap_axes(-1, -2)?)?),
                false => Ok(matmul(x, weight)?),
            },
            MultiWeight::Quantized(matrix) => matrix.matmul(x, transpose),
        }
    }

    fn arrays(&self) -> Vec<&Array> {
        match &self.weight {
            MultiWeight::Dense(weight) => vec![weight],
            MultiWeight::Quantized(matrix) => matrix.arrays(),
        }
    }
}

/// DeepSeek Sparse Attention's step (`indexer.rs`): latent attention whose cache holds, after
/// each position's rope key part, the indexer's key.
impl LatentAttention {
    /// As [`Self::forward`], each row attending only to the keys `indexer` picks for it (all
    /// of them while there are at most `index_topk`). The indexer reads the query latent, so
    /// the queries must come through the low-rank bottleneck.
    pub fn forward_sparse(
        &self,
        x: &Array,
        caches: &mut [&mut KvCache],
        indexer: &Indexer,
    ) -> Result<Array> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let QueryProj::LowRank {
            q_a_proj,
            q_a_layernorm,
            q_b_proj,
        } = &self.q
        else {
            return Err(Error::Config(
                "sparse attention needs q_lora_rank: its indexer reads the query latent".into(),
            ));
        };
        let qr = q_a_layernorm.forward(&q_a_proj.forward(x)?)?;
        let q = q_b_proj
            .forward(&qr)?
            .reshape(&[b, l, self.heads, -1])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let offsets = offsets(caches);
        let parts = self.parts(x, &q, &offsets)?;
        let index = indexer.project(x, &qr, &offsets)?;
        let out = self.attend_sparse(parts, index, indexer, caches)?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        TensorCut::all_sum(&self.tensor, self.o_proj.forward(&out)?)
    }

    /// The queries `q` ([B, heads, L, q_head_dim]) split and rotated, and the latent and
    /// rotated rope key of `x`, as [`Self::forward`] makes them.
    fn parts(&self, x: &Array, q: &Array, offsets: &[i32]) -> Result<Parts> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let (nope, rope_dim) = (self.c.qk_nope_head_dim, self.c.qk_rope_head_dim);
        let q_nope = q.index((.., .., .., ..nope));
        let q_pe = self
            .rope
            .for_rows(&q.index((.., .., .., nope..)), offsets)?;
        let compressed = self.kv_a_proj_with_mqa.forward(x)?;
        let latent =
            self.kv_a_layernorm
                .forward(&compressed.index((.., .., ..self.c.kv_lora_rank)))?;
        let k_pe = compressed
            .index((.., .., self.c.kv_lora_rank..))
            .reshape(&[b, l, 1, rope_dim])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let k_pe = self.rope.for_rows(&k_pe, offsets)?;
        Ok(Parts {
            q_nope,
            q_pe,
            latent,
            k_pe,
        })
    }

    /// Each row on its own, as [`Self::attend`]: the rope key part and the indexer key are
    /// cached side by side as the values.
    fn attend_sparse(
        &self,
        p: Parts,
        index: IndexStep,
        indexer: &Indexer,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        let latent = p.latent.expand_dims(1)?;
        let values = concatenate(&[&p.k_pe, &index.k], -1)?;
        let n = caches.len() as i32;
        let split = |a: &Array| a.split_equal(n, 0);
        let (qn, qp) = (split(&p.q_nope)?, split(&p.q_pe)?);
        let (lat, vals) = (split(&latent)?, split(&values)?);
        let (iq, iw) = (split(&index.q)?, split(&index.weights)?);
        let outs = caches
            .iter_mut()
            .enumerate()
            .map(|(r, cache)| {
                let (latent, values) = cache.update_and_fetch(&lat[r], &vals[r])?;
                let offset = cache.offset() - qn[r].shape()[2];
                let step = (&qn[r], &qp[r], (&iq[r], &iw[r]));
                self.attend_picked(step, (&latent, &values), offset, indexer)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&outs, 0)?)
    }

    /// One sequence over its cached `latent` and `values` (rope key part, then indexer key):
    /// a decode step gathers the picked keys, a chunk masks all but them (mlx-lm's two paths).
    fn attend_picked(
        &self,
        (q_nope, q_pe, index_q): (&Array, &Array, (&Array, &Array)),
        (latent, values): (&Array, &Array),
        offset: i32,
        indexer: &Indexer,
    ) -> Result<Array> {
        let l = q_nope.shape()[2];
        let rope_dim = self.c.qk_rope_head_dim;
        let k_pe = values.index((.., .., .., ..rope_dim));
        let index_k = values.index((.., .., .., rope_dim..));
        let causal = match l {
            1 => None,
            _ => Some(causal_mask(l, offset)?),
        };
        let picks = indexer.select(index_q, &index_k, causal.as_ref())?;
        match (picks, causal) {
            (None, causal) => self.attend_masked(q_nope, q_pe, (latent, &k_pe), causal),
            (Some(picks), None) => {
                let keys = (&gather(latent, &picks)?, &gather(&k_pe, &picks)?);
                self.attend_masked(q_nope, q_pe, keys, None)
            }
            (Some(picks), Some(causal)) => {
                let mask = picked_mask(&picks, &causal)?;
                self.attend_masked(q_nope, q_pe, (latent, &k_pe), Some(mask))
            }
        }
    }

    /// [`Self::attend_latent`]'s attention over keys already read, hiding where `mask` is
    /// false (a chunk's; a decode step has none).
    fn attend_masked(
        &self,
        q_nope: &Array,
        q_pe: &Array,
        (latent, k_pe): (&Array, &Array),
        mask: Option<Array>,
    ) -> Result<Array> {
        let scale = Array::from_f32(self.c.scale).as_dtype(q_pe.dtype())?;
        let mut pe_scores = matmul(q_pe.multiply(&scale)?, k_pe.swap_axes(-1, -2)?)?;
        if let Some(mask) = mask {
            let lowest = Array::from_f32(f32::MIN).as_dtype(pe_scores.dtype())?;
            pe_scores = mlx_rs::ops::select(&mask, &pe_scores, &lowest)?;
        }
        let sdpa = |q: &Array, k: &Array, v: &Array| {
            scaled_dot_product_attention(q, k, v, self.c.scale, &pe_scores, None)
        };
        if q_nope.shape()[2] == 1 {
            let q = self.embed_q.forward(q_nope, true)?;
            return self.unembed_out.forward(&sdpa(&q, latent, latent)?, true);
        }
        let k = self.embed_q.forward(latent, false)?;
        let v = self.unembed_out.forward(latent, true)?;
        Ok(sdpa(q_nope, &k, &v)?)
    }
}
