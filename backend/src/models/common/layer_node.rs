//! A dense layer's decode step as one CPU node (`quant_cpu::layer`), where the layer takes it:
//! a shape [`supports`] names, f32 on the CPU, at most [`NODE_POSITIONS`] new positions per row (one when decoding; a
//! speculative step's input and proposals), every product packed in one format, no tensor
//! cut, no o or MLP biases, no YaRN input scale, one epsilon for every norm. The node has the
//! bits of the step built op by op (`DecoderLayer::forward`'s other path), in about one
//! twentieth of the nodes: a small model's decode step costs per node, not per flop.
//! `MLX_DISTRIBUTED_LAYER_NODE=0` builds every step op by op (to compare the two).

use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};
use quant_cpu::layer::{LayerNode, LayerShape as NodeShape, LayerWeights, RowCache};
use quant_cpu::QuantWeight;

use super::attention::{f32_vector, AttentionParts};
use super::decoder::{AttentionBlock, DecoderLayer, FeedForward, Mlp};
use super::layers::{cpu_f32, packed_alike};
use super::shape::{
    Activation, AttentionKind, AttentionSpan, AttnBias, AttnScale, FeedForwardKind, LayerShape,
    MlpBias, NormKind, NormPlacement, NormShape, QkNormSpan, QueryScaling, RopeScaling, RopeShape,
    RopeSpan, SoftCap,
};
use crate::cache::{KvCache, LayerCache};
use crate::error::Result;

/// The most new positions a row may take through the node: a speculative step's input and
/// proposals, or a short prefill chunk (a prefix-cache hit's remainder). Each position
/// attends with the bits a decode step there has (a row's positions share a head's products,
/// its later keys masked), which costs per query and key; longer chunks take the op-by-op
/// step, whose blocked causal attention skips the masked keys.
pub const NODE_POSITIONS: i32 = 16;

/// Whether decode steps may take the one-node layer (`MLX_DISTRIBUTED_LAYER_NODE`, default on).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("MLX_DISTRIBUTED_LAYER_NODE").map_or(true, |v| v != "0"))
}

/// The layer shapes the node computes: pre RMS norms, a dense SwiGLU without biases, global
/// grouped-query attention scaled by `head_dim^-0.5` with full rope, q/k/v biases or none,
/// RMS q/k norms on each head or none, no soft-capping. Every field is matched, with no wildcard for the
/// shape itself: a new field does not compile until this says whether the node takes it, and
/// a new variant falls outside the pattern, so it runs op by op until the node learns it.
pub fn supports(shape: &LayerShape) -> bool {
    matches!(
        shape,
        LayerShape {
            norms: NormShape {
                kind: NormKind::Rms,
                placement: NormPlacement::Pre,
            },
            activation: Activation::SwiGlu,
            rope: RopeShape {
                span: RopeSpan::Full,
                pairs: _,
                scaling: RopeScaling::None
                    | RopeScaling::Linear
                    | RopeScaling::Llama3
                    | RopeScaling::Yarn,
            },
            attention: AttentionKind::GroupedQuery,
            span: AttentionSpan::Global,
            scale: AttnScale::InvSqrtHeadDim,
            query_scaling: QueryScaling::None,
            qk_norm: None | Some(NormKind::Rms),
            qk_norm_span: QkNormSpan::PerHead,
            bias: AttnBias::None | AttnBias::Qkv,
            mlp_bias: MlpBias::None,
            attn_softcap: SoftCap::None,
            feed_forward: FeedForwardKind::Dense,
        }
    )
}

/// A layer's node, made at its first decode step (`None` where the layer is built op by op).
#[derive(Default)]
pub struct NodeSlot(OnceLock<Option<OneNode>>);

/// The node and what a step asks of the caches.
struct OneNode {
    node: LayerNode,
    kv_heads: i32,
    head_dim: i32,
}

impl DecoderLayer {
    /// The layer's step over `x` ([B, L, D]) as one node, appending each row's positions to
    /// its cache; `None` where the layer is built op by op.
    pub(super) fn decode_as_one_node(
        &self,
        x: &Array,
        caches: &mut [&mut LayerCache],
    ) -> Result<Option<Array>> {
        let few_positions = x.ndim() == 3
            && (1..=NODE_POSITIONS).contains(&x.shape()[1])
            && x.shape()[0] == caches.len() as i32;
        let plain = (caches.iter()).all(|c| matches!(c, LayerCache::Kv(kv) if kv.is_plain()));
        if !(enabled() && few_positions && plain && cpu_f32(x)) {
            return Ok(None);
        }
        let Some(one) = self.one_node()? else {
            return Ok(None);
        };
        let mut caches = super::decoder::kv_caches(caches)?;
        Ok(Some(step(x, one, &mut caches)?))
    }

    /// The node, made and checked once; an error where the weights pass this side's checks but
    /// not the node's.
    fn one_node(&self) -> Result<Option<&OneNode>> {
        if let Some(made) = self.node.0.get() {
            return Ok(made.as_ref());
        }
        let made = self.make_one_node()?;
        Ok(self.node.0.get_or_init(|| made).as_ref())
    }

    /// The node, where the layer's shape is one [`supports`] names and its weights are as the
    /// node takes them (packed alike, f32 vectors, one epsilon, a YaRN rope without input
    /// scale).
    fn make_one_node(&self) -> Result<Option<OneNode>> {
        if !supports(&self.shape) {
            return Ok(None);
        }
        let eps = self.input_layernorm.eps;
        let norms = [&self.input_layernorm, &self.post_attention_layernorm];
        if !norms.iter().all(|n| n.eps == eps && f32_vector(&n.weight)) {
            return Ok(None);
        }
        let (AttentionBlock::Standard(attention), FeedForward::Dense(mlp)) =
            (&self.self_attn, &self.mlp)
        else {
            return Ok(None);
        };
        let (Some(a), Some((mlp_weights, format))) =
            (attention.layer_node_parts(eps), mlp_parts(mlp))
        else {
            return Ok(None);
        };
        if format != a.format {
            return Ok(None);
        }
        let [q, k, v, o] = a.projections;
        let [gate, up, down] = mlp_weights;
        let weights = LayerWeights {
            attention_norm: &self.input_layernorm.weight,
            q,
            k,
            v,
            o,
            mlp_norm: &self.post_attention_layernorm.weight,
            gate,
            up,
            down,
            qkv_bias: a.qkv_bias,
            qk_norm: a.qk_norm,
        };
        let node = LayerNode::new(&weights, &shape(&a, eps))?;
        Ok(Some(OneNode {
            node,
            kv_heads: a.heads.kv_heads,
            head_dim: a.head_dim,
        }))
    }
}

/// gate, up and down, packed in one format, without biases or a tensor cut.
fn mlp_parts(mlp: &Mlp) -> Option<([QuantWeight<'_>; 3], quant_cpu::Format)> {
    let layers = [&mlp.gate_proj, &mlp.up_proj, &mlp.down_proj];
    if !mlp.is_whole() || layers.iter().any(|l| l.bias().is_some()) {
        return None;
    }
    let (weights, format) = packed_alike(&layers)?;
    Some((weights.try_into().ok()?, format))
}

fn shape<'a>(a: &AttentionParts<'a>, eps: f32) -> NodeShape<'a> {
    NodeShape {
        heads: a.heads.heads,
        kv_heads: a.heads.kv_heads,
        eps,
        scale: a.heads.scale,
        rope: a.rope,
        format: a.format,
    }
}

/// Builds the node and hands each row's written buffers back to its cache: the same buffers,
/// written in place, where the cache was their one writer; else a copy.
fn step(x: &Array, one: &OneNode, caches: &mut [&mut KvCache]) -> Result<Array> {
    let (width, positions) = ((one.head_dim, one.head_dim), x.shape()[1]);
    let buffers = caches
        .iter_mut()
        .map(|c| c.buffers_for(positions, one.kv_heads, width, Dtype::Float32))
        .collect::<Result<Vec<_>>>()?;
    let rows: Vec<RowCache> = buffers
        .iter()
        .zip(caches.iter())
        .map(|((keys, values, exclusive), c)| RowCache {
            keys,
            values,
            offset: c.offset(),
            exclusive: *exclusive,
        })
        .collect();
    let (h, written) = one.node.step(x, &rows)?;
    drop(rows);
    drop(buffers);
    for (cache, (keys, values)) in caches.iter_mut().zip(written) {
        cache.advance(positions, keys, values);
    }
    Ok(h)
}
