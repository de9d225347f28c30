//! Mistral 4 (`mistral4`, and `mistral3`'s text model over it): DeepSeek's latent attention
//! with rope from `rope_parameters` (YaRN, its softmax scale corrected), Llama 4's query
//! temperature on the whole rotated query, and experts from `first_k_dense_replace` on, routed
//! by softmax within the best groups and normalized, with shared experts.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{
    AttentionKind, AttnBias, AttnScale, FeedForwardKind, QueryScaling, RopePairs, RopeScaling,
    RoutingKind,
};
use super::common::{
    positive, positive_f32, rope_dim, stack_experts, yarn_attention_factor, AttentionBlock,
    Decoder, DecoderLayer, EndShape, FeedForward, Groups, HeadKind, LatentAttention, LatentConfig,
    LayerShape, Mlp, ModelShape, Moe, MoeSizes, RankPart, Rope, Routing, Skeleton, TensorCut,
    MAX_EXPERTS,
};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

/// config.json (the text config under `mistral3`), as mlx-lm's `mistral4.ModelArgs` reads it.
#[derive(Deserialize)]
struct Args {
    vocab_size: i32,
    hidden_size: i32,
    intermediate_size: i32,
    moe_intermediate_size: i32,
    num_hidden_layers: i32,
    num_attention_heads: i32,
    n_shared_experts: Option<i32>,
    n_routed_experts: Option<i32>,
    routed_scaling_factor: f32,
    kv_lora_rank: i32,
    q_lora_rank: Option<i32>,
    norm_topk_prob: bool,
    rms_norm_eps: f32,
    topk_group: i32,
    num_experts_per_tok: i32,
    first_k_dense_replace: i32,
    n_group: i32,
    qk_rope_head_dim: i32,
    qk_nope_head_dim: i32,
    v_head_dim: i32,
    #[serde(default)]
    tie_word_embeddings: bool,
    rope_interleave: Option<bool>,
    #[serde(default)]
    attention_bias: bool,
    rope_parameters: Option<Value>,
}

impl Args {
    /// `rope_parameters`, which mlx-lm's Llama 4 query scaling needs.
    fn rope(&self) -> Result<&Value> {
        (self.rope_parameters.as_ref())
            .filter(|p| p.is_object())
            .ok_or_else(|| Error::Config("mistral4 needs rope_parameters".into()))
    }

    /// A number `rope_parameters` must carry, named when missing.
    fn rope_number(&self, key: &str) -> Result<f32> {
        (self.rope()?.get(key).and_then(Value::as_f64))
            .map(|v| v as f32)
            .ok_or_else(|| Error::Config(format!("rope_parameters has no number `{key}`")))
    }

    /// The rope base: `rope_parameters.rope_theta`, mlx-lm's 100000 without it.
    fn rope_theta(&self) -> Result<f32> {
        let theta = self.rope()?.get("rope_theta").and_then(Value::as_f64);
        positive_f32("rope_parameters.rope_theta", theta.unwrap_or(1e5) as f32)
    }

    /// mlx-lm's rule for which layers are sparse.
    fn is_moe(&self, layer: usize) -> bool {
        self.n_routed_experts.is_some() && layer as i64 >= i64::from(self.first_k_dense_replace)
    }

    /// Every size, checked before any arithmetic uses it.
    fn validate(&self) -> Result<()> {
        for (field, value) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_nope_head_dim", self.qk_nope_head_dim),
            ("v_head_dim", self.v_head_dim),
            ("vocab_size", self.vocab_size),
        ] {
            positive(field, value, 1 << 22)?;
        }
        rope_dim("qk_rope_head_dim", self.qk_rope_head_dim)?;
        if let Some(rank) = self.q_lora_rank {
            positive("q_lora_rank", rank, 1 << 20)?;
        }
        positive_f32("rms_norm_eps", self.rms_norm_eps)?;
        Ok(())
    }

    /// The router: its experts, k and groups, checked.
    fn routing(&self) -> Result<Option<Routing>> {
        let Some(experts) = self.n_routed_experts else {
            return Ok(None);
        };
        let experts = positive("n_routed_experts", experts, MAX_EXPERTS)?;
        Ok(Some(Routing::SoftmaxGroupsByTwo {
            top_k: positive("num_experts_per_tok", self.num_experts_per_tok, experts)?,
            groups: Groups::ranked_by_two(self.n_group, self.topk_group, experts)?,
            norm_topk_prob: self.norm_topk_prob,
            scaling: self.routed_scaling_factor,
        }))
    }
}

/// Latent attention over YaRN rope (adjacent pairs unless `rope_interleave` is false), Llama
/// 4's query temperature, and routed experts with any shared ones from
/// `first_k_dense_replace` on.
fn declare(a: &Args) -> Result<ModelShape> {
    a.validate()?;
    a.routing()?;
    let mut layer = LayerShape::llama(RopeScaling::of(Some(a.rope()?))?);
    layer.rope.pairs = RopePairs::traditional(a.rope_interleave.unwrap_or(true));
    layer.attention = AttentionKind::Latent;
    layer.bias = AttnBias::all(a.attention_bias);
    layer.scale = AttnScale::YarnMscale;
    layer.query_scaling = QueryScaling::Llama4 {
        beta: a.rope_number("llama_4_scaling_beta")?,
        original: positive_f32(
            "rope_parameters.original_max_position_embeddings",
            a.rope_number("original_max_position_embeddings")?,
        )?,
    };
    let moe = FeedForwardKind::Moe {
        routing: RoutingKind::SoftmaxGroupsByTwo,
        shared: a.n_shared_experts,
    };
    let ends = EndShape::plain(HeadKind::tied(a.tie_word_embeddings));
    ModelShape::new(a.num_hidden_layers, ends, |i| LayerShape {
        feed_forward: match a.is_moe(i) {
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

/// The fused `mlp.experts.gate_up_proj` ([experts, 2 * inter, hidden]) split into gate and up,
/// `mlp.experts.down_proj` taken as it is, and Hugging Face's per-expert tensors stacked, as
/// mlx-lm's `sanitize` does.
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    let fused: Vec<String> = (w.keys())
        .filter_map(|k| {
            k.strip_suffix(".mlp.experts.gate_up_proj")
                .map(str::to_string)
        })
        .collect();
    for layer in fused {
        let gate_up = w.take_unchecked(&format!("{layer}.mlp.experts.gate_up_proj"))?;
        let halves = gate_up.split_equal(2, 1).map_err(|e| {
            Error::Weights(format!(
                "`{layer}.mlp.experts.gate_up_proj` does not halve: {e}"
            ))
        })?;
        for (half, proj) in halves.into_iter().zip(["gate_proj", "up_proj"]) {
            w.insert(&format!("{layer}.mlp.switch_mlp.{proj}.weight"), half);
        }
        let down = format!("{layer}.mlp.experts.down_proj");
        if w.contains(&down) {
            let stacked = w.take_unchecked(&down)?;
            w.insert(&format!("{layer}.mlp.switch_mlp.down_proj.weight"), stacked);
        }
    }
    stack_experts(w, ("n_routed_experts", a.n_routed_experts.unwrap_or(1)))
}

/// `q_head_dim^-0.5`, times YaRN's `mscale_all_dim` factor squared (mlx-lm's
/// `apply_yarn_mscale` over `rope_parameters`).
fn softmax_scale(a: &Args) -> Result<f32> {
    let base = f64::from(a.qk_nope_head_dim + a.qk_rope_head_dim).powf(-0.5);
    let p = a.rope()?;
    let get = |k: &str| p.get(k).and_then(Value::as_f64);
    let factor = get("factor").unwrap_or(1.0);
    let m = get("mscale_all_dim").unwrap_or(0.0);
    if RopeScaling::of(Some(p))? == RopeScaling::None || m == 0.0 || factor <= 1.0 {
        return Ok(base as f32);
    }
    let s = yarn_attention_factor(factor, m);
    Ok((base * s * s) as f32)
}

/// Everything one layer needs, parsed and checked once.
struct Family {
    a: Args,
    shape: ModelShape,
    latent: LatentConfig,
    rope: Rope,
    /// The routed experts, where the model has them.
    experts: Option<i32>,
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let f = Family::new(args(config)?)?;
    let a = &f.a;
    let mut tensor_counts = vec![
        ("attention heads", a.num_attention_heads),
        ("MLP neurons", a.intermediate_size),
    ];
    if let Some(shared) = a.n_shared_experts.filter(|_| f.experts.is_some()) {
        let neurons = a.moe_intermediate_size * positive("n_shared_experts", shared, MAX_EXPERTS)?;
        tensor_counts.push(("shared expert neurons", neurons));
    }
    if let Some(experts) = f.experts {
        let inter = a.moe_intermediate_size;
        tensor_counts.push(TensorCut::expert_count(&part.tensor, experts, inter));
    }
    let skeleton = Skeleton {
        vocab_size: a.vocab_size,
        num_hidden_layers: a.num_hidden_layers,
        hidden_size: a.hidden_size,
        rms_norm_eps: a.rms_norm_eps,
        ends: f.shape.ends,
        windows: Vec::new(),
        tensor_counts,
    };
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        f.layer(w, prefix, i, tensor)
    })?;
    Ok(Box::new(decoder))
}

impl Family {
    fn new(a: Args) -> Result<Family> {
        let shape = declare(&a)?;
        let rope = Rope::new(
            a.qk_rope_head_dim,
            a.rope_theta()?,
            &shape.first()?.rope,
            Some(a.rope()?),
        )?;
        let latent = LatentConfig {
            hidden_size: a.hidden_size,
            heads: a.num_attention_heads,
            q_lora_rank: a.q_lora_rank,
            kv_lora_rank: a.kv_lora_rank,
            qk_rope_head_dim: a.qk_rope_head_dim,
            qk_nope_head_dim: a.qk_nope_head_dim,
            v_head_dim: a.v_head_dim,
            attention_bias: a.attention_bias,
            scale: softmax_scale(&a)?,
            norm_eps: 1e-6,
        };
        let experts = (a.routing()?).and(a.n_routed_experts);
        Ok(Family {
            a,
            shape,
            latent,
            rope,
            experts,
        })
    }

    fn layer(
        &self,
        w: &mut Weights,
        prefix: &str,
        index: usize,
        tensor: &Option<TensorCut>,
    ) -> Result<DecoderLayer> {
        let hidden = self.a.hidden_size;
        let shape = self.shape.layer(index)?;
        let attn = format!("{prefix}.self_attn");
        let attention = LatentAttention::load(w, &attn, &self.latent, &self.rope, tensor)?
            .with_query_scaling(shape.query_scaling);
        let mlp = format!("{prefix}.mlp");
        let ffn = match (shape.feed_forward, self.experts, self.a.routing()?) {
            (FeedForwardKind::Moe { shared, .. }, Some(experts), Some(routing)) => {
                let sizes = MoeSizes {
                    hidden,
                    inter: self.a.moe_intermediate_size,
                    experts,
                    shared,
                };
                let block = Moe::load(w, &mlp, (sizes, routing), true, tensor)?;
                FeedForward::Moe(Box::new(block))
            }
            _ => {
                let dims = (hidden, self.a.intermediate_size);
                FeedForward::Dense(Mlp::load(w, &mlp, dims, false, tensor)?)
            }
        };
        let norms = (hidden, self.a.rms_norm_eps);
        let blocks = (AttentionBlock::Latent(attention), ffn);
        DecoderLayer::new(w, prefix, norms, shape, blocks)
    }
}
