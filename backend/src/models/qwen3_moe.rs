//! Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3 attention with a sparse MoE block in
//! every `decoder_sparse_step`-th layer but those in `mlp_only_layers`.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{FeedForwardKind, RoutingKind};
use super::common::{
    positive, stack_experts, Decoder, DecoderConfig, DecoderLayer, FeedForward, Mlp, ModelShape,
    Moe, MoeSizes, RankPart, Routing, TensorCut, MAX_EXPERTS,
};
use super::{args, qwen3, Transformer};
use crate::error::Result;
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    qwen3: qwen3::Args,
    num_experts: i32,
    num_experts_per_tok: i32,
    decoder_sparse_step: i32,
    mlp_only_layers: Vec<i32>,
    moe_intermediate_size: i32,
    norm_topk_prob: bool,
}

impl Args {
    fn validate(&self) -> Result<()> {
        let experts = positive("num_experts", self.num_experts, MAX_EXPERTS)?;
        positive("num_experts_per_tok", self.num_experts_per_tok, experts)?;
        positive("decoder_sparse_step", self.decoder_sparse_step, MAX_EXPERTS)?;
        positive("moe_intermediate_size", self.moe_intermediate_size, 1 << 20)?;
        Ok(())
    }

    /// mlx-lm's rule for which layers are sparse.
    fn is_moe(&self, layer: usize) -> bool {
        let i = layer as i32;
        !self.mlp_only_layers.contains(&i) && (i + 1) % self.decoder_sparse_step == 0
    }

    /// Qwen3's layers, with softmax-routed experts in the sparse ones.
    fn declare(&self) -> Result<ModelShape> {
        qwen3::declare(&self.qwen3, |i| match self.is_moe(i) {
            true => FeedForwardKind::Moe {
                routing: RoutingKind::Softmax,
                shared: None,
            },
            false => FeedForwardKind::Dense,
        })
    }
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    let a: Args = args(config)?;
    a.validate()?;
    a.declare()
}

/// Hugging Face's per-expert tensors, stacked.
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    stack_experts(w, ("num_experts", a.num_experts))
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    a.validate()?;
    let c = qwen3::decoder_config(&a.qwen3, a.declare()?)?;
    let mut skeleton = c.skeleton();
    let (experts, inter) = (a.num_experts, a.moe_intermediate_size);
    skeleton
        .tensor_counts
        .push(TensorCut::expert_count(&part.tensor, experts, inter));
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        layer(w, prefix, i, (&a, &c), tensor)
    })?;
    Ok(Box::new(decoder))
}

fn layer(
    w: &mut Weights,
    prefix: &str,
    index: usize,
    (a, c): (&Args, &DecoderConfig),
    tensor: &Option<TensorCut>,
) -> Result<DecoderLayer> {
    let hidden = c.attention.hidden_size;
    let shape = c.shape.layer(index)?;
    let attention = c.attention(w, (prefix, &shape), tensor)?;
    let mlp = format!("{prefix}.mlp");
    let ffn = match shape.feed_forward {
        FeedForwardKind::Dense => FeedForward::Dense(Mlp::load(
            w,
            &mlp,
            (hidden, c.intermediate_size),
            false,
            tensor,
        )?),
        FeedForwardKind::Moe { .. } => {
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
