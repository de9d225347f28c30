//! Qwen3-Next: Gated DeltaNet linear attention in three layers of every
//! `full_attention_interval`, gated full attention (partial rope, q/k norms) in the others,
//! and softmax-routed experts with a sigmoid-gated shared expert. Qwen3.5 (`qwen3_5.rs`)
//! shares the layers.

use mlx_rs::Array;
use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{AttentionKind, AttnBias, FeedForwardKind, NormKind};
use super::common::shape::{RopeScaling, RopeSpan, RoutingKind};
use super::common::{
    positive, stack_experts, AttentionBlock, BaseArgs, Decoder, DecoderConfig, DecoderLayer,
    DeltaConfig, DeltaProjections, EndShape, FamilyTraits, FeedForward, GatedDeltaNet, HeadKind,
    LayerShape, Linear, Mlp, ModelShape, Moe, MoeSizes, RankPart, Routing, TensorCut, MAX_EXPERTS,
};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

/// The config fields of Qwen3-Next and Qwen3.5's text model.
#[derive(Deserialize)]
pub struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: i32,
    linear_num_value_heads: i32,
    linear_num_key_heads: i32,
    linear_key_head_dim: i32,
    linear_value_head_dim: i32,
    linear_conv_kernel_dim: i32,
    #[serde(default)]
    num_experts: i32,
    #[serde(default)]
    num_experts_per_tok: i32,
    #[serde(default = "one")]
    decoder_sparse_step: i32,
    #[serde(default)]
    shared_expert_intermediate_size: i32,
    #[serde(default)]
    mlp_only_layers: Vec<i32>,
    #[serde(default)]
    moe_intermediate_size: i32,
    #[serde(default)]
    norm_topk_prob: bool,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    attention_bias: bool,
    rope_theta: f32,
    partial_rotary_factor: f32,
    #[serde(default = "four")]
    full_attention_interval: i32,
}

fn one() -> i32 {
    1
}

fn four() -> i32 {
    4
}

/// Which layers route over experts: Qwen3-Next's rule, or every layer (Qwen3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SparseLayers {
    BySparseStep,
    All,
}

impl Args {
    fn validate(&self) -> Result<()> {
        let interval = self.full_attention_interval;
        positive(
            "full_attention_interval",
            interval,
            super::common::MAX_EXPERTS,
        )?;
        let k_heads = positive("linear_num_key_heads", self.linear_num_key_heads, 1 << 10)?;
        let v_heads = positive(
            "linear_num_value_heads",
            self.linear_num_value_heads,
            1 << 10,
        )?;
        positive("linear_key_head_dim", self.linear_key_head_dim, 1 << 12)?;
        positive("linear_value_head_dim", self.linear_value_head_dim, 1 << 12)?;
        positive(
            "linear_conv_kernel_dim",
            self.linear_conv_kernel_dim,
            1 << 8,
        )?;
        if v_heads % k_heads != 0 {
            return Err(Error::Config(format!(
                "linear_num_value_heads {v_heads} is not a multiple of linear_num_key_heads \
                 {k_heads}"
            )));
        }
        if self.num_experts > 0 {
            let experts = positive("num_experts", self.num_experts, MAX_EXPERTS)?;
            positive("num_experts_per_tok", self.num_experts_per_tok, experts)?;
            positive("decoder_sparse_step", self.decoder_sparse_step, MAX_EXPERTS)?;
            positive("moe_intermediate_size", self.moe_intermediate_size, 1 << 20)?;
            let shared = self.shared_expert_intermediate_size;
            positive("shared_expert_intermediate_size", shared, 1 << 20)?;
        }
        Ok(())
    }

    /// mlx-lm's `is_linear`: every layer but each `full_attention_interval`-th.
    fn is_linear(&self, layer: usize) -> bool {
        (layer as i32 + 1) % self.full_attention_interval != 0
    }

    fn is_moe(&self, layer: usize, sparse: SparseLayers) -> bool {
        let i = layer as i32;
        match sparse {
            SparseLayers::All => self.num_experts > 0,
            SparseLayers::BySparseStep => {
                !self.mlp_only_layers.contains(&i)
                    && self.num_experts > 0
                    && (i + 1) % self.decoder_sparse_step == 0
            }
        }
    }

    /// Each layer: linear or gated full attention, dense or routed (with its shared expert).
    pub fn declare(&self, sparse: SparseLayers) -> Result<ModelShape> {
        self.validate()?;
        let mut layer = LayerShape::llama(RopeScaling::of(self.base.rope_scaling.as_ref())?);
        layer.rope.span = RopeSpan::Partial {
            fraction: self.partial_rotary_factor,
        };
        layer.qk_norm = Some(NormKind::Rms);
        layer.bias = AttnBias::all(self.attention_bias);
        let ends = EndShape::plain(HeadKind::tied(self.tie_word_embeddings));
        ModelShape::new(self.base.num_hidden_layers, ends, |i| LayerShape {
            attention: match self.is_linear(i) {
                true => AttentionKind::GatedDelta,
                false => AttentionKind::GatedGroupedQuery,
            },
            feed_forward: match self.is_moe(i, sparse) {
                true => FeedForwardKind::Moe {
                    routing: RoutingKind::Softmax,
                    shared: Some(1),
                },
                false => FeedForwardKind::Dense,
            },
            ..layer
        })
    }

    fn delta(&self, projections: DeltaProjections) -> DeltaConfig {
        DeltaConfig {
            hidden_size: self.base.hidden_size,
            k_heads: self.linear_num_key_heads,
            v_heads: self.linear_num_value_heads,
            k_dim: self.linear_key_head_dim,
            v_dim: self.linear_value_head_dim,
            conv_kernel: self.linear_conv_kernel_dim,
            rms_norm_eps: self.base.rms_norm_eps,
            projections,
        }
    }
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    let a: Args = args(config)?;
    a.declare(SparseLayers::BySparseStep)
}

/// Hugging Face's layout, as mlx-lm's `sanitize` converts it when it finds per-expert
/// tensors: experts stacked, `mtp.` dropped, the convolution's axes swapped, norms `1 + w`.
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    let hugging_face = (w.keys()).any(|k| k.ends_with(".mlp.experts.0.up_proj.weight"));
    if !hugging_face {
        return Ok(());
    }
    let a: Args = args(config)?;
    w.drop_keys(|k| k.contains("mtp."));
    stack_experts(w, ("num_experts", a.num_experts))?;
    convert_convs_and_norms(w, true)
}

/// Whether a convolution's weight is laid out as Hugging Face's `[channels, 1, kernel]`.
pub fn unsanitized_conv(w: &Weights, key: &str) -> bool {
    key.contains("conv1d.weight") && w.shape_of(key).is_some_and(|s| s.last() != Some(&1))
}

/// The convolutions' weights from `[channels, 1, kernel]` to mlx's `[channels, kernel, 1]`,
/// and (where `norms`) every RMS norm's weight `w` stored as `1 + w` in its dtype.
pub fn convert_convs_and_norms(w: &mut Weights, norms: bool) -> Result<()> {
    const NORMS: [&str; 5] = [
        ".input_layernorm.weight",
        ".post_attention_layernorm.weight",
        "model.norm.weight",
        ".q_norm.weight",
        ".k_norm.weight",
    ];
    let keys: Vec<String> = w.keys().cloned().collect();
    for key in keys {
        let is_norm = norms && NORMS.iter().any(|s| key.ends_with(s));
        let converted = match (unsanitized_conv(w, &key), is_norm) {
            (true, _) => w.take_unchecked(&key)?.swap_axes(1, 2)?,
            (false, true) if w.shape_of(&key).is_some_and(|s| s.len() == 1) => {
                let v = w.take_unchecked(&key)?;
                Array::from_f32(1.0).as_dtype(v.dtype())?.add(&v)?
            }
            _ => continue,
        };
        w.insert(&key, converted);
    }
    Ok(())
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let shape = a.declare(SparseLayers::BySparseStep)?;
    build_hybrid(&a, shape, (w, part), DeltaProjections::Interleaved)
}

/// The decoder of `a`'s hybrid layers, declared as `shape`, with linear attention's
/// projections laid out as `projections`.
pub fn build_hybrid(
    a: &Args,
    shape: ModelShape,
    (w, part): (&mut Weights, &RankPart),
    projections: DeltaProjections,
) -> Result<Box<dyn Transformer>> {
    let traits = FamilyTraits {
        head_dim: a.head_dim,
        rope_theta: a.rope_theta,
        shape,
    };
    let c = a.base.decoder(traits, a.base.rope_scaling.as_ref())?;
    let mut skeleton = c.skeleton();
    if a.num_experts > 0 {
        let (experts, inter) = (a.num_experts, a.moe_intermediate_size);
        (skeleton.tensor_counts).push(TensorCut::expert_count(&part.tensor, experts, inter));
    }
    let delta = a.delta(projections);
    (skeleton.tensor_counts).extend(delta.tensor_counts());
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        layer(w, (prefix, i), (a, &c, &delta), tensor)
    })?;
    Ok(Box::new(decoder))
}

fn layer(
    w: &mut Weights,
    (prefix, index): (&str, usize),
    (a, c, delta): (&Args, &DecoderConfig, &DeltaConfig),
    tensor: &Option<TensorCut>,
) -> Result<DecoderLayer> {
    let hidden = c.attention.hidden_size;
    let shape = c.shape.layer(index)?;
    let attention = match shape.attention {
        AttentionKind::GatedDelta => {
            let prefix = format!("{prefix}.linear_attn");
            AttentionBlock::GatedDelta(Box::new(GatedDeltaNet::load(w, &prefix, delta, tensor)?))
        }
        _ => c.attention(w, (prefix, &shape), tensor)?,
    };
    let mlp = format!("{prefix}.mlp");
    let ffn = match shape.feed_forward {
        FeedForwardKind::Dense => {
            let dims = (hidden, c.intermediate_size);
            FeedForward::Dense(Mlp::load(w, &mlp, dims, false, tensor)?)
        }
        FeedForwardKind::Moe { .. } => FeedForward::Moe(Box::new(moe(w, &mlp, a, tensor)?)),
    };
    let norms = (hidden, c.attention.rms_norm_eps);
    DecoderLayer::new(w, prefix, norms, shape, (attention, ffn))
}

/// mlx-lm's `Qwen3NextSparseMoeBlock`: softmax top-k experts, and `shared_expert` times
/// `sigmoid(shared_expert_gate(x))`.
fn moe(w: &mut Weights, mlp: &str, a: &Args, tensor: &Option<TensorCut>) -> Result<Moe> {
    let hidden = a.base.hidden_size;
    let sizes = MoeSizes {
        hidden,
        inter: a.moe_intermediate_size,
        experts: a.num_experts,
        shared: None,
    };
    let routing = Routing::Softmax {
        top_k: a.num_experts_per_tok,
        norm_topk_prob: a.norm_topk_prob,
    };
    let mut moe = Moe::load(w, mlp, (sizes, routing), false, tensor)?;
    let dims = (hidden, a.shared_expert_intermediate_size);
    moe.shared = Some(Mlp::load(
        w,
        &format!("{mlp}.shared_expert"),
        dims,
        false,
        tensor,
    )?);
    let gate = format!("{mlp}.shared_expert_gate");
    moe.shared_gate = Some(Linear::load(w, &gate, hidden, 1, false)?);
    Ok(moe)
}
