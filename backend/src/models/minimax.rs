//! MiniMax M2 and M2.5 (`minimax`, `minimax_m2`): grouped-query attention with RMS q/k norms
//! over all heads at once, rope over the first `rotary_dim` dims of each head (halves, no
//! scaling), and a sigmoid-routed mixture in every layer (`block_sparse_moe`), its router over
//! f32 inputs with a correction bias; Hugging Face's per-expert `w1`/`w2`/`w3` stacked at load.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{
    FeedForwardKind, NormKind, QkNormSpan, RopeScaling, RopeSpan, RoutingKind,
};
use super::common::{
    keys, positive, yes, BaseArgs, Decoder, DecoderConfig, DecoderLayer, EndShape, FamilyTraits,
    FeedForward, HeadKind, LayerShape, ModelShape, Moe, MoeSizes, RankPart, Routing, TensorCut,
    MAX_EXPERTS,
};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: Option<i32>,
    rotary_dim: i32,
    rope_theta: f32,
    num_local_experts: i32,
    num_experts_per_tok: i32,
    #[serde(default = "sigmoid")]
    scoring_func: String,
    #[serde(default = "yes")]
    use_qk_norm: bool,
    #[serde(default)]
    tie_word_embeddings: bool,
}

fn sigmoid() -> String {
    "sigmoid".into()
}

impl Args {
    fn head_dim(&self) -> Result<i32> {
        self.base.head_dim(self.head_dim)
    }

    /// The experts and k, checked; the router only scores by sigmoid.
    fn routing(&self) -> Result<(i32, i32)> {
        if self.scoring_func != "sigmoid" {
            return Err(Error::Config(format!(
                "scoring_func `{}` is not supported (minimax routes by sigmoid scores)",
                self.scoring_func
            )));
        }
        let experts = positive("num_local_experts", self.num_local_experts, MAX_EXPERTS)?;
        let top_k = positive("num_experts_per_tok", self.num_experts_per_tok, experts)?;
        Ok((experts, top_k))
    }
}

/// The rope's span for `rotary` of `head_dim` dims: whole, or the fraction whose
/// `RopeShape::dims` gives back `rotary` exactly (the next f32 up where rounding fell short).
fn rope_span(rotary: i32, head_dim: i32) -> Result<RopeSpan> {
    if rotary < 2 || rotary > head_dim || rotary % 2 != 0 {
        return Err(Error::Config(format!(
            "rotary_dim is {rotary}; it must be even and in 2..={head_dim} (head_dim)"
        )));
    }
    if rotary == head_dim {
        return Ok(RopeSpan::Full);
    }
    let fraction = rotary as f32 / head_dim as f32;
    [fraction, f32::from_bits(fraction.to_bits() + 1)]
        .into_iter()
        .find(|f| (f64::from(head_dim) * f64::from(*f)) as i32 == rotary)
        .map(|fraction| RopeSpan::Partial { fraction })
        .ok_or_else(|| Error::Internal(format!("rotary_dim {rotary} of {head_dim}: no fraction")))
}

/// Llama's layer with RMS q/k norms over all heads, partial rope over halves (rope_scaling
/// ignored, as mlx-lm's plain `nn.RoPE`) and sigmoid-routed experts in every layer.
fn declare(a: &Args) -> Result<ModelShape> {
    a.routing()?;
    let mut layer = LayerShape::llama(RopeScaling::None);
    layer.rope.span = rope_span(a.rotary_dim, a.head_dim()?)?;
    layer.qk_norm = a.use_qk_norm.then_some(NormKind::Rms);
    layer.qk_norm_span = QkNormSpan::AllHeads;
    layer.feed_forward = FeedForwardKind::Moe {
        routing: RoutingKind::SigmoidNormalized,
        shared: None,
    };
    let ends = EndShape::plain(HeadKind::tied(a.tie_word_embeddings));
    ModelShape::new(a.base.num_hidden_layers, ends, |_| layer)
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

/// Hugging Face's per-expert `block_sparse_moe.experts.{e}.{w1,w2,w3}` stacked into mlx-lm's
/// `switch_mlp.{gate,down,up}_proj`, as its `sanitize` does; layers past the last (the
/// multi-token-prediction modules) dropped.
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    let experts = positive("num_local_experts", a.num_local_experts, MAX_EXPERTS)? as usize;
    for (theirs, ours) in [("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")] {
        let suffix = format!(".experts.0.{theirs}.weight");
        let blocks: Vec<String> = (w.keys())
            .filter_map(|k| k.strip_suffix(&suffix).map(str::to_string))
            .collect();
        for moe in blocks {
            w.stack_experts(
                &format!("{moe}.switch_mlp.{ours}"),
                |e| format!("{moe}.experts.{e}.{theirs}"),
                experts,
            )?;
        }
    }
    let layers = a.base.num_hidden_layers.max(0) as usize;
    w.drop_keys(|key| keys::layer_of(key).is_some_and(|i| i >= layers));
    Ok(())
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let (experts, top_k) = a.routing()?;
    let traits = FamilyTraits {
        head_dim: a.head_dim()?,
        rope_theta: a.rope_theta,
        shape: declare(&a)?,
    };
    let c = a.base.decoder(traits, None)?;
    let mut skeleton = c.skeleton();
    // Every layer is a mixture: its experts' neurons (or the experts) are what a split cuts.
    let inter = c.intermediate_size;
    skeleton.tensor_counts = vec![
        ("attention heads", c.attention.heads),
        ("KV heads", c.attention.kv_heads),
        TensorCut::expert_count(&part.tensor, experts, inter),
    ];
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        layer(w, (prefix, i), (&c, (experts, top_k)), tensor)
    })?;
    Ok(Box::new(decoder))
}

fn layer(
    w: &mut Weights,
    (prefix, index): (&str, usize),
    (c, (experts, top_k)): (&DecoderConfig, (i32, i32)),
    tensor: &Option<TensorCut>,
) -> Result<DecoderLayer> {
    let hidden = c.attention.hidden_size;
    let shape = c.shape.layer(index)?;
    let attention = c.attention(w, (prefix, &shape), tensor)?;
    let moe = format!("{prefix}.block_sparse_moe");
    let routing = Routing::SigmoidNormalized {
        top_k,
        // Kept as stored, as mlx-lm's cast predicate keeps it.
        correction: w.take(&format!("{moe}.e_score_correction_bias"), &[experts])?,
    };
    let sizes = MoeSizes {
        hidden,
        inter: c.intermediate_size,
        experts,
        shared: None,
    };
    let block = Moe::load(w, &moe, (sizes, routing), false, tensor)?;
    let norms = (hidden, c.attention.rms_norm_eps);
    DecoderLayer::new(
        w,
        prefix,
        norms,
        shape,
        (attention, FeedForward::Moe(Box::new(block))),
    )
}
