//! GLM-4.5, 4.6 and 4.7 (`glm4_moe`): grouped-query attention with partial rotary over halves
//! (rope scaling ignored, as mlx-lm's plain `nn.RoPE`), optional q/k norms and q/k/v biases;
//! DeepSeek-V3's sigmoid routing with its correction bias and shared experts from
//! `first_k_dense_replace` on; the multi-token-prediction layers dropped.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::RoutingKind;
use super::common::shape::{AttnBias, FeedForwardKind, NormKind, RopeScaling, RopeSpan};
use super::common::{
    positive, BaseArgs, Decoder, DecoderConfig, DecoderLayer, EndShape, FamilyTraits, FeedForward,
    Groups, HeadKind, LayerShape, Mlp, ModelShape, Moe, MoeSizes, RankPart, TensorCut, MAX_EXPERTS,
};
use super::deepseek::{sigmoid_routing, RoutingSpec};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: i32,
    moe_intermediate_size: i32,
    norm_topk_prob: bool,
    n_group: i32,
    topk_group: i32,
    n_shared_experts: Option<i32>,
    n_routed_experts: i32,
    routed_scaling_factor: f32,
    num_experts_per_tok: i32,
    first_k_dense_replace: i32,
    rope_theta: f32,
    use_qk_norm: bool,
    attention_bias: bool,
    partial_rotary_factor: f32,
    #[serde(default = "noaux_tc")]
    topk_method: String,
    #[serde(default = "sigmoid")]
    scoring_func: String,
}

fn noaux_tc() -> String {
    "noaux_tc".into()
}

fn sigmoid() -> String {
    "sigmoid".into()
}

/// Partial rope over halves, optional q/k norms and q/k/v biases; sigmoid-routed experts from
/// `first_k_dense_replace` on; the head always its own.
fn declare(a: &Args) -> Result<ModelShape> {
    let fraction = a.partial_rotary_factor;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(Error::Config(format!(
            "partial_rotary_factor is {fraction}; it must be in (0, 1]"
        )));
    }
    match (a.topk_method.as_str(), a.scoring_func.as_str()) {
        ("noaux_tc", "sigmoid") => {}
        (method, scoring) => {
            return Err(Error::Config(format!(
                "topk_method `{method}` with scoring_func `{scoring}` is not supported \
                 (glm4_moe routes by noaux_tc over sigmoid scores)"
            )))
        }
    }
    let mut layer = LayerShape::llama(RopeScaling::None);
    layer.rope.span = RopeSpan::Partial { fraction };
    layer.qk_norm = a.use_qk_norm.then_some(NormKind::Rms);
    if a.attention_bias {
        layer.bias = AttnBias::Qkv;
    }
    let moe = FeedForwardKind::Moe {
        routing: RoutingKind::SigmoidCorrected,
        shared: a.n_shared_experts,
    };
    let ends = EndShape::plain(HeadKind::Untied);
    ModelShape::new(a.base.num_hidden_layers, ends, |i| LayerShape {
        feed_forward: match i as i64 >= i64::from(a.first_k_dense_replace) {
            true => moe,
            false => FeedForwardKind::Dense,
        },
        ..layer
    })
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

impl Args {
    /// The router's experts, k and groups, checked.
    fn routing(&self) -> Result<RoutingSpec> {
        let experts = positive("n_routed_experts", self.n_routed_experts, MAX_EXPERTS)?;
        Ok(RoutingSpec {
            experts,
            top_k: positive("num_experts_per_tok", self.num_experts_per_tok, experts)?,
            groups: Some(Groups::ranked_by_two(
                self.n_group,
                self.topk_group,
                experts,
            )?),
        })
    }
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let spec = a.routing()?;
    let traits = FamilyTraits {
        head_dim: a.head_dim,
        rope_theta: a.rope_theta,
        shape: declare(&a)?,
    };
    let c = a.base.decoder(traits, None)?;
    let mut skeleton = c.skeleton();
    let inter = a.moe_intermediate_size;
    positive("moe_intermediate_size", inter, 1 << 20)?;
    if let Some(shared) = a.n_shared_experts {
        let neurons = inter * positive("n_shared_experts", shared, MAX_EXPERTS)?;
        skeleton
            .tensor_counts
            .push(("shared expert neurons", neurons));
    }
    (skeleton.tensor_counts).push(TensorCut::expert_count(&part.tensor, spec.experts, inter));
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        layer(w, (prefix, i), (&a, &c, spec), tensor)
    })?;
    Ok(Box::new(decoder))
}

fn layer(
    w: &mut Weights,
    (prefix, index): (&str, usize),
    (a, c, spec): (&Args, &DecoderConfig, RoutingSpec),
    tensor: &Option<TensorCut>,
) -> Result<DecoderLayer> {
    let hidden = c.attention.hidden_size;
    let shape = c.shape.layer(index)?;
    let attention = c.attention(w, (prefix, &shape), tensor)?;
    let mlp = format!("{prefix}.mlp");
    let ffn = match shape.feed_forward {
        FeedForwardKind::Dense => {
            let dims = (hidden, c.intermediate_size);
            FeedForward::Dense(Mlp::load(w, &mlp, dims, false, tensor)?)
        }
        FeedForwardKind::Moe { shared, .. } => {
            let weighting = (a.norm_topk_prob, a.routed_scaling_factor);
            let routing = sigmoid_routing(w, &mlp, spec, weighting)?;
            let sizes = MoeSizes {
                hidden,
                inter: a.moe_intermediate_size,
                experts: spec.experts,
                shared,
            };
            FeedForward::Moe(Box::new(Moe::load(
                w,
                &mlp,
                (sizes, routing),
                true,
                tensor,
            )?))
        }
    };
    let norms = (hidden, c.attention.rms_norm_eps);
    DecoderLayer::new(w, prefix, norms, shape, (attention, ffn))
}
