//! DeepSeek's multi-head latent attention (MLA): keys and values come from a low-rank latent
//! and a shared rotary key part. DeepSeek-V2 expands the latent per head and caches full keys
//! and values, as mlx-lm's `deepseek_v2`; DeepSeek-V3 (and Kimi K2) caches the latent itself
//! and folds the expansion into the queries and outputs, as mlx-lm's `deepseek_v3`.

use mlx_rs::fast::scaled_dot_product_attention;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{arange, broadcast_to, concatenate, dequantize, ge, matmul, quantized_matmul};
use mlx_rs::{Array, Dtype};

use super::attend::{offsets, Heads};
use super::{Linear, RmsNorm, Rope, Split, TensorSplit};
use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::weights::{MatrixWeight, Shape, Weights};

/// The norms inside MLA use this epsilon whatever the config says (as mlx-lm).
const LATENT_NORM_EPS: f32 = 1e-6;

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
    /// Cache the latent (DeepSeek-V3) rather than expanded keys and values (DeepSeek-V2).
    pub absorbed: bool,
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

/// How keys and values come out of the latent.
enum Expansion {
    /// `kv_b_proj` expands the latent into every head's keys and values (V2).
    PerHead { kv_b_proj: Linear },
    /// Per-head matrices applied to queries and outputs, the latent cached as is (V3).
    Absorbed {
        embed_q: MultiLinear,
        unembed_out: MultiLinear,
    },
}

pub struct LatentAttention {
    q: QueryProj,
    kv_a_proj_with_mqa: Linear,
    kv_a_layernorm: RmsNorm,
    expansion: Expansion,
    o_proj: Linear,
    rope: Rope,
    c: LatentConfig,
    /// Heads on this rank.
    heads: i32,
    tensor: Option<TensorSplit>,
}

impl LatentAttention {
    /// Loads `{prefix}.*`; tensor-parallel, each rank keeps 1/size of the heads (queries,
    /// the latent's expansion, the output's inputs) and the latent projection whole.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        c: &LatentConfig,
        rope: &Rope,
        tensor: &Option<TensorSplit>,
    ) -> Result<LatentAttention> {
        let n = tensor.as_ref().map_or(1, |t| t.size as i32);
        let rows = Split::rows(tensor);
        let key = |name: &str| format!("{prefix}.{name}");
        let q_out = c.heads * c.q_head_dim();
        let q = match c.q_lora_rank {
            None => QueryProj::Direct(w.linear_split(
                &key("q_proj"),
                c.hidden_size,
                q_out,
                false,
                rows,
            )?),
            Some(rank) => QueryProj::LowRank {
                q_a_proj: w.linear(&key("q_a_proj"), c.hidden_size, rank, c.attention_bias)?,
                q_a_layernorm: w.rms_norm(&key("q_a_layernorm"), rank, LATENT_NORM_EPS)?,
                q_b_proj: w.linear_split(&key("q_b_proj"), rank, q_out, false, rows)?,
            },
        };
        let latent = c.kv_lora_rank + c.qk_rope_head_dim;
        Ok(LatentAttention {
            q,
            kv_a_proj_with_mqa: w.linear(
                &key("kv_a_proj_with_mqa"),
                c.hidden_size,
                latent,
                c.attention_bias,
            )?,
            kv_a_layernorm: w.rms_norm(&key("kv_a_layernorm"), c.kv_lora_rank, LATENT_NORM_EPS)?,
            expansion: Expansion::load(w, prefix, c, tensor)?,
            o_proj: w.linear_split(
                &key("o_proj"),
                c.heads * c.v_head_dim,
                c.hidden_size,
                c.attention_bias,
                Split::cols(tensor),
            )?,
            rope: rope.clone(),
            c: *c,
            heads: c.heads / n,
            tensor: tensor.clone(),
        })
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
        let out = match &self.expansion {
            Expansion::PerHead { kv_b_proj } => self.attend_expanded(kv_b_proj, parts, caches)?,
            Expansion::Absorbed {
                embed_q,
                unembed_out,
            } => self.attend_absorbed((embed_q, unembed_out), parts, caches)?,
        };
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        TensorSplit::all_sum(&self.tensor, self.o_proj.forward(&out)?)
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

    /// V2: every head's keys (no-rope part from the latent, rope part shared) and values,
    /// cached and attended like any multi-head attention.
    fn attend_expanded(
        &self,
        kv_b_proj: &Linear,
        p: Parts,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        let (b, l) = (p.latent.shape()[0], p.latent.shape()[1]);
        let nope = self.c.qk_nope_head_dim;
        let kv = kv_b_proj
            .forward(&p.latent)?
            .reshape(&[b, l, self.heads, -1])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let k_pe = broadcast_to(&p.k_pe, &[b, self.heads, l, self.c.qk_rope_head_dim])?;
        let keys = concatenate(&[kv.index((.., .., .., ..nope)), k_pe], -1)?;
        let values = kv.index((.., .., .., nope..));
        let queries = concatenate(&[p.q_nope, p.q_pe], -1)?;
        let heads = Heads {
            heads: self.heads,
            kv_heads: self.heads,
            v_head_dim: self.c.v_head_dim,
            scale: self.c.scale,
        };
        heads.attend(&queries, &keys, &values, caches)
    }

    /// V3: the latent and the rope key part are cached; each row attends on its own.
    fn attend_absorbed(
        &self,
        mats: (&MultiLinear, &MultiLinear),
        p: Parts,
        caches: &mut [&mut KvCache],
    ) -> Result<Array> {
        let latent = p.latent.expand_dims(1)?;
        if let [cache] = caches {
            return self.attend_latent(mats, &p.q_nope, &p.q_pe, (&latent, &p.k_pe), cache);
        }
        let n = caches.len() as i32;
        let split = |a: &Array| a.split_equal(n, 0);
        let (qn, qp, lat, kp) = (
            split(&p.q_nope)?,
            split(&p.q_pe)?,
            split(&latent)?,
            split(&p.k_pe)?,
        );
        let outs = caches
            .iter_mut()
            .enumerate()
            .map(|(r, cache)| self.attend_latent(mats, &qn[r], &qp[r], (&lat[r], &kp[r]), cache))
            .collect::<Result<Vec<_>>>()?;
        Ok(concatenate(&outs, 0)?)
    }

    /// One sequence: scores are the latent part (through `embed_q`) plus the rope part,
    /// passed to MLX's attention as an additive mask, exactly as mlx-lm does.
    fn attend_latent(
        &self,
        (embed_q, unembed_out): (&MultiLinear, &MultiLinear),
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
            let q = embed_q.forward(q_nope, true)?;
            return unembed_out.forward(&sdpa(&q, &latent, &latent)?, true);
        }
        let k = embed_q.forward(&latent, false)?;
        let v = unembed_out.forward(&latent, true)?;
        Ok(sdpa(q_nope, &k, &v)?)
    }

    /// Elements one position adds to this layer's cache on this rank.
    pub fn kv_elements(&self) -> usize {
        match self.expansion {
            Expansion::PerHead { .. } => {
                (self.heads * (self.c.q_head_dim() + self.c.v_head_dim)) as usize
            }
            Expansion::Absorbed { .. } => (self.c.kv_lora_rank + self.c.qk_rope_head_dim) as usize,
        }
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
        match &self.expansion {
            Expansion::PerHead { kv_b_proj } => out.extend(kv_b_proj.arrays()),
            Expansion::Absorbed {
                embed_q,
                unembed_out,
            } => out.extend(embed_q.arrays().into_iter().chain(unembed_out.arrays())),
        }
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

impl Expansion {
    fn load(
        w: &mut Weights,
        prefix: &str,
        c: &LatentConfig,
        tensor: &Option<TensorSplit>,
    ) -> Result<Expansion> {
        let kv_b = format!("{prefix}.kv_b_proj");
        let out = c.heads * (c.qk_nope_head_dim + c.v_head_dim);
        if !c.absorbed {
            let kv_b_proj =
                w.linear_split(&kv_b, c.kv_lora_rank, out, false, Split::rows(tensor))?;
            return Ok(Expansion::PerHead { kv_b_proj });
        }
        if w.contains(&format!("{kv_b}.weight")) {
            split_kv_b(w, prefix, c)?;
        }
        let heads = Split::stacked(tensor);
        Ok(Expansion::Absorbed {
            embed_q: MultiLinear::load(
                w,
                &format!("{prefix}.embed_q"),
                Shape::stacked(c.heads, c.kv_lora_rank, c.qk_nope_head_dim),
                heads,
            )?,
            unembed_out: MultiLinear::load(
                w,
                &format!("{prefix}.unembed_out"),
                Shape::stacked(c.heads, c.v_head_dim, c.kv_lora_rank),
                heads,
            )?,
        })
    }
}

/// One matrix per head, `[heads, out, in]`, as mlx-lm's `MultiLinear`.
pub enum MultiLinear {
    Dense(Array),
    /// As stored (MLX's quantized matmul over the heads).
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        group: i32,
        bits: i32,
    },
}

impl MultiLinear {
    /// In the f32 modes the matrices are dequantized (they are small beside the experts, and
    /// `quant-cpu` has no batched per-head product).
    fn load(w: &mut Weights, prefix: &str, shape: Shape, split: Split) -> Result<MultiLinear> {
        Ok(match w.matrix(prefix, shape, split)? {
            MatrixWeight::Dense(weight) => MultiLinear::Dense(weight),
            MatrixWeight::Quantized {
                weight,
                scales,
                biases,
                q,
            } => MultiLinear::Quantized {
                weight,
                scales,
                biases,
                group: q.group_size,
                bits: q.bits,
            },
            MatrixWeight::Packed(p) => MultiLinear::Dense(dequantize(
                &p.weight,
                &p.scales.as_dtype(Dtype::Float32)?,
                &p.biases.as_dtype(Dtype::Float32)?,
                p.format.group as i32,
                p.format.bits as i32,
            )?),
        })
    }

    /// `x @ W^T` per head (`transpose`), or `x @ W`.
    fn forward(&self, x: &Array, transpose: bool) -> Result<Array> {
        match self {
            MultiLinear::Dense(weight) => match transpose {
                true => Ok(matmul(x, weight.swap_axes(-1, -2)?)?),
                false => Ok(matmul(x, weight)?),
            },
            MultiLinear::Quantized {
                weight,
                scales,
                biases,
                group,
                bits,
            } => Ok(quantized_matmul(
                x, weight, scales, biases, transpose, *group, *bits,
            )?),
        }
    }

    fn arrays(&self) -> Vec<&Array> {
        match self {
            MultiLinear::Dense(weight) => vec![weight],
            MultiLinear::Quantized {
                weight,
                scales,
                biases,
                ..
            } => vec![weight, scales, biases],
        }
    }
}

/// Checkpoints converted before mlx-lm cached the latent store `kv_b_proj`; its `sanitize`
/// splits it into the per-head `embed_q` (no-rope key part, transposed) and `unembed_out`
/// (value part), requantized with the same bits and group size when it was quantized.
fn split_kv_b(w: &mut Weights, prefix: &str, c: &LatentConfig) -> Result<()> {
    let kv_b = format!("{prefix}.kv_b_proj");
    let weight = w.take_unchecked(&format!("{kv_b}.weight"))?;
    let quantized = match w.contains(&format!("{kv_b}.scales")) {
        true => {
            let scales = w.take_unchecked(&format!("{kv_b}.scales"))?;
            let biases = w.take_unchecked(&format!("{kv_b}.biases"))?;
            let cols = |a: &Array| a.shape().last().copied().unwrap_or(0);
            let bits = cols(&weight) * 32 / c.kv_lora_rank;
            let group = c.kv_lora_rank / cols(&scales).max(1);
            Some((scales, biases, bits, group))
        }
        false => None,
    };
    let full = match &quantized {
        Some((scales, biases, bits, group)) => dequantize(&weight, scales, biases, *group, *bits)?,
        None => weight,
    };
    let head_dim = c.qk_nope_head_dim + c.v_head_dim;
    let full = full
        .reshape(&[c.heads, head_dim, c.kv_lora_rank])
        .map_err(|e| Error::Weights(format!("`{kv_b}.weight`: {e}")))?;
    let nope = c.qk_nope_head_dim;
    let wk = full.index((.., ..nope, ..)).swap_axes(-1, -2)?;
    let wv = full.index((.., nope.., ..));
    for (name, m) in [("embed_q", wk), ("unembed_out", wv)] {
        let key = format!("{prefix}.{name}");
        match &quantized {
            Some((_, _, bits, group)) => {
                let (q, s, b) = mlx_rs::ops::quantize(m.contiguous()?, *group, *bits)?;
                w.insert(&format!("{key}.weight"), q);
                w.insert(&format!("{key}.scales"), s);
                w.insert(&format!("{key}.biases"), b);
            }
            None => w.insert(&format!("{key}.weight"), m.contiguous()?),
        }
    }
    Ok(())
}
