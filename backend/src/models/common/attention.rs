//! Multi-head attention with grouped KV heads, optional q/k norms (on each head, or on every
//! head at once) and q/k/v biases.

use mlx_rs::Array;

use super::attend::{offsets, Heads};
use super::layers::packed_alike;
use super::shape::{AttentionKind, AttnBias, LayerShape, NormKind, QkNormSpan, QueryScaling};
use super::{Linear, RmsNorm, Rope, TensorCut};
use crate::cache::KvCache;
use crate::error::Result;
use crate::weights::{Cut, Weights};
use quant_cpu::QuantWeight;

/// The shape of one attention block, from the family's config.
#[derive(Debug, Clone, Copy)]
pub struct AttentionConfig {
    pub hidden_size: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    /// Which projections carry biases (q/k/v: Qwen2; all four: Llama's attention_bias).
    pub bias: AttnBias,
    /// Norms on each head of q and k (RMS: Qwen3; RMS times `1 + w`: Gemma 3).
    pub qk_norm: Option<NormKind>,
    /// Whether each q/k norm spans one head or all of them (MiniMax).
    pub qk_norm_span: QkNormSpan,
    pub rms_norm_eps: f32,
    /// The softmax scale, as the family's `AttnScale` computes it.
    pub scale: f32,
}

pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    qk_norm_span: QkNormSpan,
    /// Heads on this rank (all of them, unless tensor-parallel).
    heads: Heads,
    head_dim: i32,
    rope: Rope,
    /// A temperature on the rotated queries by position (Mistral 3).
    query_scaling: QueryScaling,
    /// One logit per head (this rank's heads) that joins each softmax (gpt-oss).
    sinks: Option<Array>,
    /// q_proj also makes a gate per head, and the output is times its sigmoid (Qwen3-Next).
    gated: bool,
    tensor: Option<TensorCut>,
}

impl Attention {
    /// Loads a layer of `shape` (its window and query temperature; the rest is `c`'s) with
    /// q/k/v cut by output and o by input when `tensor` is set: each rank keeps 1/size of the
    /// heads and KV heads, and o's partial outputs are summed over ranks.
    pub fn load(
        w: &mut Weights,
        (prefix, shape): (&str, &LayerShape),
        c: &AttentionConfig,
        rope: &Rope,
        tensor: &Option<TensorCut>,
    ) -> Result<Attention> {
        let (q_out, kv_out) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let gated = shape.attention == AttentionKind::GatedGroupedQuery;
        let n = tensor.as_ref().map_or(1, |t| t.size as i32);
        let (rows, cols) = (Cut::rows(tensor), Cut::cols(tensor));
        let norm = |w: &mut Weights, name: &str, heads: i32| match c.qk_norm {
            Some(kind) => {
                let prefix = format!("{prefix}.{name}");
                let span = (c.qk_norm_span, heads * c.head_dim);
                qk_norm(
                    w,
                    &prefix,
                    (c.head_dim, span),
                    (c.rms_norm_eps, kind),
                    tensor,
                )
                .map(Some)
            }
            None => Ok(None),
        };
        let mut proj = |name: &str, (inp, out): (i32, i32), bias: bool, cut: Cut| {
            Linear::load_split(w, &format!("{prefix}.{name}"), inp, out, bias, cut)
        };
        let q_width = if gated { 2 * q_out } else { q_out };
        let q_proj = proj("q_proj", (c.hidden_size, q_width), c.bias.on_qkv(), rows)?;
        let k_proj = proj("k_proj", (c.hidden_size, kv_out), c.bias.on_qkv(), rows)?;
        let v_proj = proj("v_proj", (c.hidden_size, kv_out), c.bias.on_qkv(), rows)?;
        let o_proj = proj("o_proj", (q_out, c.hidden_size), c.bias.on_o(), cols)?;
        let sinks = sinks(w, (prefix, shape), c.heads, rows)?;
        Ok(Attention {
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            q_norm: norm(w, "q_norm", c.heads)?,
            k_norm: norm(w, "k_norm", c.kv_heads)?,
            qk_norm_span: c.qk_norm_span,
            heads: Heads {
                heads: c.heads / n,
                kv_heads: c.kv_heads / n,
                scale: c.scale,
                window: shape.window(),
                numerics: w.mode().numerics(),
            },
            head_dim: c.head_dim,
            rope: rope.clone(),
            query_scaling: shape.query_scaling,
            sinks,
            gated,
            tensor: tensor.clone(),
        })
    }

    /// `x`: [B, L, hidden]; row b appends its keys and values to `caches[b]` (rows of a
    /// batch decode one token each, L = 1).
    pub fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let heads = |y: Array, n: i32, norm: Option<&RmsNorm>| -> Result<Array> {
            let y = y.reshape(&[b, l, n, -1])?;
            let y = match norm {
                Some(norm) => norm.forward(&y)?,
                None => y,
            };
            Ok(y.transpose_axes(&[0, 2, 1, 3])?)
        };
        let h = &self.heads;
        let [q, k, v]: [Array; 3] =
            Linear::forward_all(&[&self.q_proj, &self.k_proj, &self.v_proj], x)?
                .try_into()
                .map_err(|_| crate::error::Error::Internal("q/k/v: not three outputs".into()))?;
        let (q, gate) = self.gate(q, (b, l))?;
        let (q, k) = match self.qk_norm_span {
            QkNormSpan::PerHead => (q, k),
            QkNormSpan::AllHeads => self.all_heads(q, k)?,
        };
        let queries = heads(q, h.heads, self.per_head(&self.q_norm))?;
        let keys = heads(k, h.kv_heads, self.per_head(&self.k_norm))?;
        let values = heads(v, h.kv_heads, None)?;
        // One rope for the batch, each row from its own position.
        let offsets = offsets(caches);
        let queries = self.rope.for_rows(&queries, &offsets)?;
        let queries = query_temperature(self.query_scaling, &queries, &offsets)?;
        let keys = self.rope.for_rows(&keys, &offsets)?;
        let out = h.attend((&queries, &keys, &values), caches, self.sinks.as_ref())?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, l, -1])?;
        let out = match gate {
            Some(gate) => out.multiply(mlx_rs::ops::sigmoid(&gate)?)?,
            None => out,
        };
        TensorCut::all_sum(&self.tensor, self.o_proj.forward(&out)?)
    }

    /// A gated block's q_proj output split, per head, into the queries and the gate
    /// ([B, L, heads * head_dim]), as mlx-lm's `Qwen3NextAttention` splits it.
    fn gate(&self, q: Array, (b, l): (i32, i32)) -> Result<(Array, Option<Array>)> {
        if !self.gated {
            return Ok((q, None));
        }
        let both = q.reshape(&[b, l, self.heads.heads, -1])?;
        let halves = both.split_equal(2, -1)?;
        let [queries, gate]: [Array; 2] = halves
            .try_into()
            .map_err(|_| crate::error::Error::Internal("q/gate: not two halves".into()))?;
        Ok((queries, Some(gate.reshape(&[b, l, -1])?)))
    }

    /// What the one-node decode layer takes from this block, when it takes the block: every
    /// projection packed in one format, biases on q/k/v only and f32, f32 q/k norms with the
    /// layer's epsilon, a rope it runs, no tensor cut.
    pub fn layer_node_parts(&self, eps: f32) -> Option<AttentionParts<'_>> {
        let (w, format) = packed_alike(&[&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj])?;
        let [q, k, v, o]: [QuantWeight; 4] = w.try_into().ok()?;
        let biases = [&self.q_proj, &self.k_proj, &self.v_proj].map(Linear::bias);
        let qkv_bias = match biases {
            [None, None, None] => None,
            [Some(a), Some(b), Some(c)] if [a, b, c].iter().all(|x| f32_vector(x)) => {
                Some([a, b, c])
            }
            _ => return None,
        };
        let qk_norm = match (&self.q_norm, &self.k_norm) {
            (None, None) => None,
            (Some(q), Some(k)) if [q, k].iter().all(|n| n.eps == eps && f32_vector(&n.weight)) => {
                Some([&q.weight, &k.weight])
            }
            _ => return None,
        };
        let plain = self.tensor.is_none()
            && self.o_proj.bias().is_none()
            && self.qk_norm_span == QkNormSpan::PerHead
            && self.sinks.is_none()
            && !self.gated;
        plain.then_some(AttentionParts {
            projections: [q, k, v, o],
            format,
            qkv_bias,
            qk_norm,
            heads: self.heads,
            head_dim: self.head_dim,
            rope: self.rope.layer_spec()?,
        })
    }

    /// `norm` where it is applied to each head.
    fn per_head<'a>(&self, norm: &'a Option<RmsNorm>) -> Option<&'a RmsNorm> {
        norm.as_ref()
            .filter(|_| self.qk_norm_span == QkNormSpan::PerHead)
    }

    /// `q` and `k` ([B, L, heads * head_dim]) through their norms over all heads at once.
    /// Split by tensor parallelism, each rank holds some heads: the sums of squares are summed
    /// over the ranks before the rsqrt, as mlx-lm's `ShardedRMSNorm` does (in f32, cast
    /// back). Both ride on one all_sum: the same elementwise sums as its two, half the waits.
    fn all_heads(&self, q: Array, k: Array) -> Result<(Array, Array)> {
        let Some(t) = &self.tensor else {
            let norm = |x: Array, n: &Option<RmsNorm>| match n {
                Some(n) => n.forward(&x),
                None => Ok(x),
            };
            return Ok((norm(q, &self.q_norm)?, norm(k, &self.k_norm)?));
        };
        let (wq, wk) = (
            q.as_dtype(mlx_rs::Dtype::Float32)?,
            k.as_dtype(mlx_rs::Dtype::Float32)?,
        );
        let sums = [
            wq.square()?.sum_axis(-1, true)?,
            wk.square()?.sum_axis(-1, true)?,
        ];
        let summed = t.group.all_sum(&mlx_rs::ops::concatenate(&sums, -1)?)?;
        let [sq, sk]: [Array; 2] = summed
            .split_equal(2, -1)?
            .try_into()
            .map_err(|_| crate::error::Error::Internal("q/k sums: not two".into()))?;
        let scaled =
            |x: Array, wide: Array, squares: Array, n: &Option<RmsNorm>| -> Result<Array> {
                let Some(norm) = n else {
                    return Ok(x);
                };
                let width = x.shape()[x.ndim() - 1] * t.size as i32;
                let mean = squares.divide(Array::from_f32(width as f32))?;
                let inv = mlx_rs::ops::rsqrt(&mean.add(Array::from_f32(norm.eps))?)?;
                let y = wide.multiply(&inv)?.multiply(&norm.weight)?;
                Ok(y.as_dtype(x.dtype())?)
            };
        Ok((
            scaled(q, wq, sq, &self.q_norm)?,
            scaled(k, wk, sk, &self.k_norm)?,
        ))
    }

    /// Whether a logit per head joins the softmax (gpt-oss's sinks).
    pub fn has_sinks(&self) -> bool {
        self.sinks.is_some()
    }

    pub fn head_dim(&self) -> i32 {
        self.head_dim
    }

    /// Keys and values one position adds to the cache on this rank, in elements.
    pub fn kv_elements(&self) -> usize {
        2 * (self.heads.kv_heads * self.head_dim) as usize
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
            .chain(self.sinks.iter())
            .collect()
    }
}

/// A q or k norm of `kind`: `head_dim` wide on each head, or (all heads at once) `width`
/// wide, this rank's part of it where tensor parallelism splits the heads.
fn qk_norm(
    w: &mut Weights,
    prefix: &str,
    (head_dim, (span, width)): (i32, (QkNormSpan, i32)),
    (eps, kind): (f32, NormKind),
    tensor: &Option<TensorCut>,
) -> Result<RmsNorm> {
    if span == QkNormSpan::PerHead {
        return RmsNorm::load_kind(w, prefix, (head_dim, eps), kind);
    }
    let norm = RmsNorm::load_kind(w, prefix, (width, eps), kind)?;
    let Some(t) = tensor else {
        return Ok(norm);
    };
    let part = width / t.size as i32;
    let start = part * t.rank as i32;
    let rows = mlx_rs::ops::arange::<i32, i32>(start, start + part, None)?;
    Ok(RmsNorm {
        weight: norm.weight.take_axis(&rows, 0)?,
        eps,
    })
}

/// The rotated queries ([B, heads, L, d], row b from `offsets[b]`) times Llama 4's temperature
/// `1 + beta * ln(1 + floor(position / original))`, op for op as mlx-lm's
/// `_get_llama_4_attn_scale` (1 below `original` positions, where it changes nothing).
pub(super) fn query_temperature(
    scaling: QueryScaling,
    queries: &Array,
    offsets: &[i32],
) -> Result<Array> {
    let QueryScaling::Llama4 { beta, original } = scaling else {
        return Ok(queries.clone());
    };
    let len = queries.shape()[2];
    let starts = Array::from_slice(offsets, &[offsets.len() as i32, 1]);
    let positions = mlx_rs::ops::arange::<i32, i32>(None, len, None)?
        .reshape(&[1, len])?
        .add(&starts)?;
    let one = Array::from_f32(1.0);
    let steps = mlx_rs::ops::floor(&positions.divide(Array::from_f32(original))?)?;
    let scale = one
        .add(Array::from_f32(beta).multiply(one.add(&steps)?.log()?)?)?
        .reshape(&[offsets.len() as i32, 1, len, 1])?
        .as_dtype(queries.dtype())?;
    Ok(queries.multiply(&scale)?)
}

/// An attention block as the one-node decode layer takes it ([`Attention::layer_node_parts`]).
pub struct AttentionParts<'a> {
    /// q, k, v, o.
    pub projections: [QuantWeight<'a>; 4],
    pub format: quant_cpu::Format,
    pub qkv_bias: Option<[&'a Array; 3]>,
    pub qk_norm: Option<[&'a Array; 2]>,
    pub heads: Heads,
    pub head_dim: i32,
    pub rope: quant_cpu::fast::RopeSpec<'a>,
}

/// A 1-D f32 array (a bias or a norm's weight, as the CPU nodes take them).
pub fn f32_vector(a: &Array) -> bool {
    a.dtype() == mlx_rs::Dtype::Float32 && a.ndim() == 1
}

/// A layer's sinks (a logit per head, cut with the heads), where its shape has them.
fn sinks(
    w: &mut Weights,
    (prefix, shape): (&str, &LayerShape),
    heads: i32,
    rows: Cut,
) -> Result<Option<Array>> {
    Ok(match shape.attention {
        AttentionKind::GroupedQuerySinks => {
            Some(w.vector(&format!("{prefix}.sinks"), heads, rows)?)
        }
        AttentionKind::GroupedQuery
        | AttentionKind::GatedGroupedQuery
        | AttentionKind::GatedDelta
        | AttentionKind::Latent
        | AttentionKind::SparseLatent => None,
    })
}
