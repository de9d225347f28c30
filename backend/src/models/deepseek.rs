//! DeepSeek-V2 (and V2-Lite, DeepSeek-Coder-V2) and DeepSeek-V3 (and Kimi K2): multi-head
//! latent attention, and MoE layers with shared experts from `first_k_dense_replace` on.
//! V2 routes by softmax (greedy or group-limited); V3 by sigmoid with a correction bias.
//! DeepSeek-V3.2 and GLM-5 are V3 with sparse attention (a lightning indexer per layer).

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::RopeShape;
use super::common::shape::{
    AttentionKind, AttnBias, AttnScale, FeedForwardKind, RopePairs, RopeScaling, RoutingKind,
};
use super::common::{
    keys, positive, positive_f32, rope_dim, stack_experts, yarn_attention_factor, AttentionBlock,
    Decoder, DecoderLayer, EndShape, FeedForward, Groups, HeadKind, LatentAttention, LatentConfig,
    LayerShape, Mlp, ModelShape, Moe, MoeSizes, RankPart, Rope, Routing, Skeleton, TensorCut,
    MAX_EXPERTS,
};
use super::common::{Indexer, IndexerConfig, SparseLatentAttention};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

/// Which DeepSeek generation: how attention caches and how the router picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V2,
    V3,
}

/// config.json, with mlx-lm's defaults for absent fields.
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
    #[serde(default = "one")]
    routed_scaling_factor: f32,
    #[serde(default = "kv_lora_rank")]
    kv_lora_rank: i32,
    #[serde(default = "qk_rope_head_dim")]
    qk_rope_head_dim: i32,
    #[serde(default = "head_dim")]
    v_head_dim: i32,
    #[serde(default = "head_dim")]
    qk_nope_head_dim: i32,
    topk_method: Option<String>,
    #[serde(default = "yes")]
    norm_topk_prob: bool,
    n_group: Option<i32>,
    topk_group: Option<i32>,
    num_experts_per_tok: Option<i32>,
    #[serde(default = "one_i")]
    moe_layer_freq: i32,
    #[serde(default)]
    first_k_dense_replace: i32,
    #[serde(default = "eps")]
    rms_norm_eps: f32,
    #[serde(default = "theta")]
    rope_theta: f32,
    rope_scaling: Option<Value>,
    #[serde(default)]
    attention_bias: bool,
}

fn one() -> f32 {
    1.0
}
fn one_i() -> i32 {
    1
}
fn yes() -> bool {
    true
}
fn kv_lora_rank() -> i32 {
    512
}
fn qk_rope_head_dim() -> i32 {
    64
}
fn head_dim() -> i32 {
    128
}
fn eps() -> f32 {
    1e-6
}
fn theta() -> f32 {
    10000.0
}

/// What differs between the families on this architecture beyond the router.
#[derive(Debug, Clone, Copy)]
struct Flavor {
    version: Version,
    /// mlx-lm's default when config.json has no `q_lora_rank` at all (`null` means none).
    q_lora_rank: i32,
    /// The latent norms' epsilon: fixed, or `None` for config.json's `rms_norm_eps`.
    latent_eps: Option<f32>,
    /// DeepSeek Sparse Attention's lightning indexer, for the families that have one.
    sparse: Option<Sparse>,
}

const DEEPSEEK_V2: Flavor = Flavor {
    version: Version::V2,
    q_lora_rank: 1536,
    latent_eps: Some(1e-6),
    sparse: None,
};
const DEEPSEEK_V3: Flavor = Flavor {
    version: Version::V3,
    ..DEEPSEEK_V2
};
/// GLM-4.7-Flash (`glm4_moe_lite`): DeepSeek-V3's layers under GLM's defaults.
const GLM_LITE: Flavor = Flavor {
    version: Version::V3,
    q_lora_rank: 768,
    latent_eps: None,
    sparse: None,
};

pub fn build_v2(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    Ok(Box::new(build(config, w, part, DEEPSEEK_V2)?))
}

pub fn build_v3(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    Ok(Box::new(build(config, w, part, DEEPSEEK_V3)?))
}

/// GLM-4.7-Flash: DeepSeek-V3's latent attention and sigmoid-routed experts, its latent norms
/// at `rms_norm_eps` (mlx-lm's `glm4_moe_lite`).
pub fn build_glm_lite(
    config: &Value,
    w: &mut Weights,
    part: &RankPart,
) -> Result<Box<dyn Transformer>> {
    Ok(Box::new(build(config, w, part, GLM_LITE)?))
}

/// Hugging Face's per-expert tensors, stacked.
pub fn sanitize_v2(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    stack_experts(w, ("n_routed_experts", a.n_routed_experts.unwrap_or(1)))
}

/// As V2, and the multi-token-prediction layers after the last (`num_hidden_layers` on),
/// which generation does not use, dropped as mlx-lm does.
pub fn sanitize_v3(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    stack_experts(w, ("n_routed_experts", a.n_routed_experts.unwrap_or(1)))?;
    let layers = a.num_hidden_layers.max(0) as usize;
    w.drop_keys(|key| keys::layer_of(key).is_some_and(|i| i >= layers));
    Ok(())
}

/// The shape a V2 `config` declares.
pub fn shape_v2(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?, Version::V2)
}

/// The shape a V3 `config` declares.
pub fn shape_v3(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?, Version::V3)
}

/// Latent attention over adjacent-pair rope, its scale YaRN-corrected where the scaling says
/// so, and routed experts (with any shared ones) from `first_k_dense_replace` on; the head
/// is always its own.
fn declare(a: &Args, version: Version) -> Result<ModelShape> {
    let scaling = a.rope_scaling.as_ref();
    let mut layer = LayerShape::llama(RopeScaling::of(scaling)?);
    layer.rope.pairs = RopePairs::Adjacent;
    layer.attention = AttentionKind::Latent;
    layer.bias = AttnBias::all(a.attention_bias);
    if yarn_scale(scaling).is_some() {
        layer.scale = AttnScale::YarnMscale;
    }
    let routing = match version {
        Version::V2 => RoutingKind::SoftmaxGroups,
        Version::V3 => RoutingKind::SigmoidCorrected,
    };
    let ends = EndShape::plain(HeadKind::Untied);
    ModelShape::new(a.num_hidden_layers, ends, |i| LayerShape {
        feed_forward: match a.is_moe(i) {
            true => FeedForwardKind::Moe {
                routing,
                shared: a.n_shared_experts,
            },
            false => FeedForwardKind::Dense,
        },
        ..layer
    })
}

impl Args {
    /// mlx-lm's rule for which layers are sparse.
    fn is_moe(&self, layer: usize) -> bool {
        let i = layer as i32;
        self.n_routed_experts.is_some()
            && i >= self.first_k_dense_replace
            && i % self.moe_layer_freq.max(1) == 0
    }
}

/// Everything one layer needs, parsed and checked once.
struct Family {
    a: Args,
    shape: ModelShape,
    version: Version,
    latent: LatentConfig,
    rope: Rope,
    routing: RoutingSpec,
    /// The lightning indexer's sizes and rope (DeepSeek Sparse Attention).
    indexer: Option<(IndexerConfig, Rope)>,
}

fn build(config: &Value, w: &mut Weights, part: &RankPart, flavor: Flavor) -> Result<Decoder> {
    let a: Args = args(config)?;
    let q_lora_rank = match config.get("q_lora_rank") {
        None => Some(flavor.q_lora_rank),
        Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| {
            Error::Config(format!("q_lora_rank is {v}; it must be an integer or null"))
        })? as i32),
    };
    let mut f = Family::new(a, q_lora_rank, flavor)?;
    if let Some(sparse) = flavor.sparse {
        f.make_sparse(config, sparse)?;
    }
    let skeleton = Skeleton {
        vocab_size: f.a.vocab_size,
        num_hidden_layers: f.a.num_hidden_layers,
        hidden_size: f.a.hidden_size,
        rms_norm_eps: f.a.rms_norm_eps,
        ends: f.shape.ends,
        windows: f.shape.windows(),
        tensor_counts: f.tensor_counts(&part.tensor),
    };
    Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        f.layer(w, prefix, i, tensor)
    })
}

/// The router's settings, before its weights.
#[derive(Clone, Copy)]
pub struct RoutingSpec {
    pub experts: i32,
    pub top_k: i32,
    pub groups: Option<Groups>,
}

impl Family {
    fn new(a: Args, q_lora_rank: Option<i32>, flavor: Flavor) -> Result<Family> {
        let version = flavor.version;
        for (field, value) in [
            ("hidden_size", a.hidden_size),
            ("num_hidden_layers", a.num_hidden_layers),
            ("intermediate_size", a.intermediate_size),
            ("moe_intermediate_size", a.moe_intermediate_size),
            ("num_attention_heads", a.num_attention_heads),
            ("kv_lora_rank", a.kv_lora_rank),
            ("qk_nope_head_dim", a.qk_nope_head_dim),
            ("v_head_dim", a.v_head_dim),
            ("vocab_size", a.vocab_size),
            ("moe_layer_freq", a.moe_layer_freq),
        ] {
            positive(field, value, 1 << 22)?;
        }
        rope_dim("qk_rope_head_dim", a.qk_rope_head_dim)?;
        if let Some(rank) = q_lora_rank {
            positive("q_lora_rank", rank, 1 << 20)?;
        }
        positive_f32("rms_norm_eps", a.rms_norm_eps)?;
        positive_f32("rope_theta", a.rope_theta)?;
        let routing = routing_spec(&a, version)?;
        let shape = declare(&a, version)?;
        let scaling = a.rope_scaling.as_ref();
        let rope = Rope::new(
            a.qk_rope_head_dim,
            a.rope_theta,
            &shape.first()?.rope,
            scaling,
        )?;
        let latent = LatentConfig {
            hidden_size: a.hidden_size,
            heads: a.num_attention_heads,
            q_lora_rank,
            kv_lora_rank: a.kv_lora_rank,
            qk_rope_head_dim: a.qk_rope_head_dim,
            qk_nope_head_dim: a.qk_nope_head_dim,
            v_head_dim: a.v_head_dim,
            attention_bias: a.attention_bias,
            scale: softmax_scale(&a, scaling),
            norm_eps: flavor.latent_eps.unwrap_or(a.rms_norm_eps),
        };
        Ok(Family {
            a,
            shape,
            version,
            latent,
            rope,
            routing,
            indexer: None,
        })
    }

    /// What tensor parallelism cuts: heads, dense neurons and every expert's neurons.
    fn tensor_counts(&self, tensor: &Option<TensorCut>) -> Vec<(&'static str, i32)> {
        let mut counts = vec![
            ("attention heads", self.a.num_attention_heads),
            ("MLP neurons", self.a.intermediate_size),
        ];
        if let Some(shared) = self.a.n_shared_experts {
            counts.push((
                "shared expert neurons",
                self.a.moe_intermediate_size * shared,
            ));
        }
        if self.a.n_routed_experts.is_some() {
            let (experts, inter) = (self.routing.experts, self.a.moe_intermediate_size);
            counts.push(TensorCut::expert_count(tensor, experts, inter));
        }
        counts
    }

    fn layer(
        &self,
        w: &mut Weights,
        prefix: &str,
        index: usize,
        tensor: &Option<TensorCut>,
    ) -> Result<DecoderLayer> {
        let hidden = self.a.hidden_size;
        let attn = format!("{prefix}.self_attn");
        let attention = LatentAttention::load(w, &attn, &self.latent, &self.rope, tensor)?;
        let mlp = format!("{prefix}.mlp");
        let shape = self.shape.layer(index)?;
        let ffn = match shape.feed_forward {
            FeedForwardKind::Moe { .. } => FeedForward::Moe(Box::new(self.moe(w, &mlp, tensor)?)),
            FeedForwardKind::Dense => {
                let dims = (hidden, self.a.intermediate_size);
                FeedForward::Dense(Mlp::load(w, &mlp, dims, false, tensor)?)
            }
        };
        let norms = (hidden, self.a.rms_norm_eps);
        let blocks = (self.attention_block(w, &attn, attention)?, ffn);
        DecoderLayer::new(w, prefix, norms, shape, blocks)
    }

    fn moe(&self, w: &mut Weights, mlp: &str, tensor: &Option<TensorCut>) -> Result<Moe> {
        let r = self.routing;
        let routing = match self.version {
            Version::V2 => Routing::SoftmaxGroups {
                top_k: r.top_k,
                groups: r.groups,
                scaling: self.a.routed_scaling_factor,
            },
            Version::V3 => sigmoid_routing(
                w,
                mlp,
                r,
                (self.a.norm_topk_prob, self.a.routed_scaling_factor),
            )?,
        };
        let sizes = MoeSizes {
            hidden: self.a.hidden_size,
            inter: self.a.moe_intermediate_size,
            experts: r.experts,
            shared: self.a.n_shared_experts,
        };
        Moe::load(
            w,
            mlp,
            (sizes, routing),
            self.version == Version::V3,
            tensor,
        )
    }
}

/// DeepSeek-V3's router (GLM-4.5's too): sigmoid, chosen with `{mlp}.gate`'s
/// `e_score_correction_bias` within the best groups, weights normalized where
/// `norm_topk_prob` says and scaled.
pub fn sigmoid_routing(
    w: &mut Weights,
    mlp: &str,
    r: RoutingSpec,
    (norm_topk_prob, scaling): (bool, f32),
) -> Result<Routing> {
    Ok(Routing::Sigmoid {
        top_k: r.top_k,
        groups: r.groups.unwrap_or(Groups { count: 1, keep: 1 }),
        norm_topk_prob,
        scaling,
        // Kept as stored, as mlx-lm's cast predicate keeps it.
        correction: w.take(&format!("{mlp}.gate.e_score_correction_bias"), &[r.experts])?,
    })
}

/// The router settings, checked: V2's `topk_method` is greedy or group-limited greedy, V3's
/// must be `noaux_tc` (the only one mlx-lm runs).
fn routing_spec(a: &Args, version: Version) -> Result<RoutingSpec> {
    let experts = match a.n_routed_experts {
        Some(e) => positive("n_routed_experts", e, MAX_EXPERTS)?,
        None => 1,
    };
    let top_k = match (a.num_experts_per_tok, version) {
        (Some(k), _) => k,
        (None, Version::V3) => 1,
        (None, Version::V2) if a.n_routed_experts.is_none() => 1,
        (None, Version::V2) => {
            return Err(Error::Config("num_experts_per_tok is missing".into()));
        }
    };
    positive("num_experts_per_tok", top_k, experts)?;
    let groups = |count: Option<i32>, keep: Option<i32>| match (count, keep) {
        (Some(c), Some(k)) => Groups::new(c, k, experts).map(Some),
        _ => Err(Error::Config(
            "group-limited routing needs n_group and topk_group".into(),
        )),
    };
    let method = a.topk_method.as_deref();
    let groups = match (version, method) {
        (Version::V2, None | Some("gready" | "greedy")) => None,
        (Version::V2, Some("group_limited_greedy")) => groups(a.n_group, a.topk_group)?,
        (Version::V3, None | Some("noaux_tc")) => {
            let (count, keep) = (a.n_group.unwrap_or(1), a.topk_group.unwrap_or(1));
            Some(Groups::ranked_by_two(count, keep, experts)?)
        }
        (_, Some(other)) => {
            return Err(Error::Config(format!(
                "topk_method `{other}` is not supported for this model (supported: {})",
                match version {
                    Version::V2 => "greedy, group_limited_greedy",
                    Version::V3 => "noaux_tc",
                }
            )))
        }
    };
    Ok(RoutingSpec {
        experts,
        top_k,
        groups,
    })
}

/// `q_head_dim^-0.5`, times YaRN's `mscale_all_dim` factor squared when the scaling has one.
fn softmax_scale(a: &Args, scaling: Option<&Value>) -> f32 {
    let base = f64::from(a.qk_nope_head_dim + a.qk_rope_head_dim).powf(-0.5);
    match yarn_scale(scaling) {
        Some((m, factor)) => {
            let s = yarn_attention_factor(factor, m);
            (base * s * s) as f32
        }
        None => base as f32,
    }
}

/// YaRN's `mscale_all_dim` and `factor`, where the scaling corrects the softmax scale.
fn yarn_scale(scaling: Option<&Value>) -> Option<(f64, f64)> {
    let get = |k: &str| scaling.and_then(|s| s.get(k)).and_then(Value::as_f64);
    match (get("mscale_all_dim"), get("factor")) {
        (Some(m), Some(factor)) if m != 0.0 => Some((m, factor)),
        _ => None,
    }
}

/// DeepSeek Sparse Attention's settings a family fixes.
#[derive(Debug, Clone, Copy)]
struct Sparse {
    /// `indexer_rope_interleave` when config.json does not say: adjacent pairs or halves.
    interleave: bool,
}

/// DeepSeek-V3.2 (`deepseek_v32`): DeepSeek-V3 whose latent attention reads only the keys its
/// lightning indexer picks; the indexer's rope rotates halves unless config.json says.
const DEEPSEEK_V32: Flavor = Flavor {
    sparse: Some(Sparse { interleave: false }),
    ..DEEPSEEK_V3
};
/// GLM-5 (`glm_moe_dsa`): DeepSeek-V3.2's layers (mlx-lm subclasses them), rope from
/// `rope_parameters`, the indexer's rope over adjacent pairs unless config.json says.
const GLM_DSA: Flavor = Flavor {
    sparse: Some(Sparse { interleave: true }),
    ..DEEPSEEK_V3
};

pub fn build_v32(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    Ok(Box::new(build(config, w, part, DEEPSEEK_V32)?))
}

/// GLM-5: its config read as mlx-lm's `glm_moe_dsa` reads it, then DeepSeek-V3.2.
pub fn build_glm_dsa(
    config: &Value,
    w: &mut Weights,
    part: &RankPart,
) -> Result<Box<dyn Transformer>> {
    let config = with_rope_parameters(config)?;
    Ok(Box::new(build(&config, w, part, GLM_DSA)?))
}

/// The shape a DeepSeek-V3.2 `config` declares: V3's, every layer's attention sparse.
pub fn shape_v32(config: &Value) -> Result<ModelShape> {
    let a: Args = args(config)?;
    index_args(config, &a)?;
    let mut shape = declare(&a, Version::V3)?;
    for layer in &mut shape.layers {
        layer.attention = AttentionKind::SparseLatent;
    }
    Ok(shape)
}

/// The shape a GLM-5 `config` declares.
pub fn shape_glm_dsa(config: &Value) -> Result<ModelShape> {
    shape_v32(&with_rope_parameters(config)?)
}

/// `config` with `rope_parameters` as `rope_scaling` and its `rope_theta` as the base (mlx-lm's
/// `glm_moe_dsa`, whose config.json has no top-level rope fields).
fn with_rope_parameters(config: &Value) -> Result<Value> {
    let params = config.get("rope_parameters").ok_or_else(|| {
        Error::Config("rope_parameters is missing (GLM-5 reads rope_theta from it)".into())
    })?;
    let theta = params.get("rope_theta").filter(|t| t.is_number());
    let theta = theta.ok_or_else(|| {
        Error::Config("rope_parameters.rope_theta is missing or not a number".into())
    })?;
    let mut config = config.clone();
    if let Some(map) = config.as_object_mut() {
        map.insert("rope_theta".into(), theta.clone());
        map.insert("rope_scaling".into(), params.clone());
    }
    Ok(config)
}

/// config.json's indexer fields, with mlx-lm's `deepseek_v32` defaults.
#[derive(Deserialize)]
struct IndexArgs {
    #[serde(default = "index_head_dim")]
    index_head_dim: i32,
    #[serde(default = "index_n_heads")]
    index_n_heads: i32,
    #[serde(default = "index_topk")]
    index_topk: i32,
    indexer_rope_interleave: Option<bool>,
}

/// The indexer's fields, checked: sizes positive, its head wide enough for the rope, and a
/// query latent for it to read.
fn index_args(config: &Value, a: &Args) -> Result<IndexArgs> {
    if config.get("q_lora_rank").is_some_and(Value::is_null) {
        return Err(null_q_lora_rank());
    }
    let ix: IndexArgs = args(config)?;
    positive("index_n_heads", ix.index_n_heads, 1 << 16)?;
    positive("index_topk", ix.index_topk, i32::MAX)?;
    positive("index_head_dim", ix.index_head_dim, 1 << 16)?;
    if ix.index_head_dim < a.qk_rope_head_dim {
        return Err(Error::Config(format!(
            "index_head_dim {} is below qk_rope_head_dim {}: the indexer's rope rotates that \
             many of its dims",
            ix.index_head_dim, a.qk_rope_head_dim
        )));
    }
    Ok(ix)
}

fn null_q_lora_rank() -> Error {
    Error::Config("q_lora_rank is null: sparse attention's indexer reads the query latent".into())
}

fn index_head_dim() -> i32 {
    128
}
fn index_n_heads() -> i32 {
    64
}
fn index_topk() -> i32 {
    2048
}

impl Family {
    /// Every layer's attention sparse, with the indexer `config` sizes (checked).
    fn make_sparse(&mut self, config: &Value, sparse: Sparse) -> Result<()> {
        let ix = index_args(config, &self.a)?;
        let q_lora_rank = self.latent.q_lora_rank.ok_or_else(null_q_lora_rank)?;
        let scaling = self.a.rope_scaling.as_ref();
        let interleave = ix.indexer_rope_interleave.unwrap_or(sparse.interleave);
        let shape = RopeShape {
            pairs: RopePairs::traditional(interleave),
            ..self.shape.first()?.rope
        };
        let rope = Rope::new(self.a.qk_rope_head_dim, self.a.rope_theta, &shape, scaling)?;
        let c = IndexerConfig {
            hidden_size: self.a.hidden_size,
            q_lora_rank,
            heads: ix.index_n_heads,
            head_dim: ix.index_head_dim,
            topk: ix.index_topk,
        };
        self.indexer = Some((c, rope));
        for layer in &mut self.shape.layers {
            layer.attention = AttentionKind::SparseLatent;
        }
        Ok(())
    }

    /// A layer's attention block: latent, or sparse with its indexer (whole on every rank).
    fn attention_block(
        &self,
        w: &mut Weights,
        attn: &str,
        attention: LatentAttention,
    ) -> Result<AttentionBlock> {
        let Some((c, rope)) = &self.indexer else {
            return Ok(AttentionBlock::Latent(attention));
        };
        let indexer = Indexer::load(w, &format!("{attn}.indexer"), c, rope.clone())?;
        Ok(AttentionBlock::SparseLatent(Box::new(
            SparseLatentAttention { attention, indexer },
        )))
    }
}
