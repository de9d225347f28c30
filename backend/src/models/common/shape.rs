//! A family's declared layer shape: what its config.json makes of each block, as enums. The
//! shared blocks build and run a layer from its shape, and every fast path names the shapes
//! it takes (`layer_node::supports`), so a shape no path knows runs op by op or is refused
//! at load, never half-taken.

use serde_json::Value;

use crate::error::{Error, Result};

/// How a norm scales its normalized input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// RMS norm times `w`.
    Rms,
    /// RMS norm times `1 + w` (Gemma).
    RmsPlusOne,
    /// Mean-centred LayerNorm.
    LayerNorm,
}

/// Where a layer's norms sit around its two blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormPlacement {
    /// Before each block, the residual added after it.
    Pre,
    /// After each block, before the residual add.
    Post,
    /// Before and after each block, with the checkpoint's names for the four norms.
    Sandwich(SandwichKeys),
}

/// What a sandwich-normed checkpoint calls its four norms: before and after attention,
/// before and after the MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandwichKeys {
    /// `input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`,
    /// `post_feedforward_layernorm` (Gemma 2/3).
    Gemma,
    /// `input_layernorm`, `post_self_attn_layernorm`, `post_attention_layernorm`,
    /// `post_mlp_layernorm` (GLM-4).
    Glm,
}

impl SandwichKeys {
    /// The four norms' names: before and after attention, before and after the MLP.
    pub fn names(self) -> [&'static str; 4] {
        match self {
            SandwichKeys::Gemma => [
                "input_layernorm",
                "post_attention_layernorm",
                "pre_feedforward_layernorm",
                "post_feedforward_layernorm",
            ],
            SandwichKeys::Glm => [
                "input_layernorm",
                "post_self_attn_layernorm",
                "post_attention_layernorm",
                "post_mlp_layernorm",
            ],
        }
    }
}

/// A layer's norms: their kind and where they sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NormShape {
    pub kind: NormKind,
    pub placement: NormPlacement,
}

impl NormShape {
    /// RMS norms before each block (llama and every family here).
    pub const PRE_RMS: NormShape = NormShape {
        kind: NormKind::Rms,
        placement: NormPlacement::Pre,
    };
}

/// The feed-forward block's gated activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up`.
    SwiGlu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeGluTanh,
    /// gpt-oss's SwiGLU: the gate clamped from above and the linear part clamped both
    /// ways (at 7), `(up + 1) * gate * sigmoid(1.702 * gate)`.
    ClampedSwiGlu,
}

/// How much of each head rope rotates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeSpan {
    Full,
    /// The first `fraction` of each head's dims.
    Partial {
        fraction: f32,
    },
}

/// Which dims rope pairs: adjacent ones (mlx's `traditional`) or the two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopePairs {
    Halves,
    Adjacent,
}

impl RopePairs {
    /// From config.json's `rope_traditional` (or a family's fixed choice).
    pub fn traditional(traditional: bool) -> RopePairs {
        match traditional {
            true => RopePairs::Adjacent,
            false => RopePairs::Halves,
        }
    }
}

/// `rope_scaling`'s kind; its numbers stay in config.json for the rope to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeScaling {
    None,
    Linear,
    Llama3,
    Yarn,
}

impl RopeScaling {
    /// The kind `rope_scaling` names (`type` or `rope_type`); absent or `default` is none.
    pub fn of(scaling: Option<&Value>) -> Result<RopeScaling> {
        let kind = scaling
            .and_then(|s| s.get("type").or_else(|| s.get("rope_type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        match kind {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear),
            "llama3" => Ok(RopeScaling::Llama3),
            "yarn" | "deepseek_yarn" => Ok(RopeScaling::Yarn),
            other => Err(Error::Config(format!(
                "rope_scaling type `{other}` is not supported"
            ))),
        }
    }
}

/// A layer's rotary embedding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeShape {
    pub span: RopeSpan,
    pub pairs: RopePairs,
    pub scaling: RopeScaling,
}

impl RopeShape {
    /// The leading dims of a `head_dim` head that rotate (mlx-lm's `int(head_dim * factor)`).
    pub fn dims(&self, head_dim: i32) -> i32 {
        match self.span {
            RopeSpan::Full => head_dim,
            RopeSpan::Partial { fraction } => (f64::from(head_dim) * f64::from(fraction)) as i32,
        }
    }
}

/// A temperature on the queries after rope, by position (Llama 4's, which Mistral 3 uses):
/// `1 + beta * ln(1 + floor(position / original))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueryScaling {
    None,
    Llama4 { beta: f32, original: f32 },
}

/// What one q or k norm spans: each head alone (Qwen3, Gemma 3), or every head of the
/// projection at once (MiniMax: one weight of `heads * head_dim`, one mean of squares).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNormSpan {
    PerHead,
    AllHeads,
}

/// The attention mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Multi-head attention with grouped KV heads (llama, qwen).
    GroupedQuery,
    /// Multi-head latent attention (DeepSeek).
    Latent,
    /// Latent attention over the keys a lightning indexer picks (DeepSeek Sparse Attention:
    /// DeepSeek-V3.2, GLM-5).
    SparseLatent,
    /// Grouped-query attention with a learned logit per head (`self_attn.sinks`) that joins
    /// each query's softmax as one more key with no value (gpt-oss).
    GroupedQuerySinks,
}

/// Which positions a layer attends to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttentionSpan {
    Global,
    /// The last `window` positions, with the layer's own rope base where it has one.
    Sliding {
        window: i32,
        rope_base: Option<f32>,
    },
}

impl AttentionSpan {
    /// The window, for a sliding layer.
    pub fn window(self) -> Option<i32> {
        match self {
            AttentionSpan::Global => None,
            AttentionSpan::Sliding { window, .. } => Some(window),
        }
    }
}

/// The softmax scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttnScale {
    /// `head_dim^-0.5`.
    InvSqrtHeadDim,
    /// `q_head_dim^-0.5` times YaRN's `mscale_all_dim` factor squared (DeepSeek).
    YarnMscale,
    /// `query_pre_attn_scalar^-0.5` (Gemma).
    QueryPreAttnScalar(f32),
}

/// Which attention projections carry biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnBias {
    None,
    /// q, k and v (Qwen2).
    Qkv,
    /// q, k, v and o (Llama's `attention_bias`).
    QkvO,
}

impl AttnBias {
    /// From a config's `attention_bias`, which covers every projection.
    pub fn all(bias: bool) -> AttnBias {
        match bias {
            true => AttnBias::QkvO,
            false => AttnBias::None,
        }
    }

    pub fn on_qkv(self) -> bool {
        matches!(self, AttnBias::Qkv | AttnBias::QkvO)
    }

    pub fn on_o(self) -> bool {
        self == AttnBias::QkvO
    }
}

/// Whether the feed-forward projections carry biases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpBias {
    None,
    All,
}

impl MlpBias {
    pub fn of(bias: bool) -> MlpBias {
        match bias {
            true => MlpBias::All,
            false => MlpBias::None,
        }
    }

    pub fn present(self) -> bool {
        self == MlpBias::All
    }
}

/// Tanh soft-capping of logits (Gemma 2): `cap * tanh(x / cap)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SoftCap {
    None,
    Tanh(f32),
}

/// How a mixture picks its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingKind {
    /// Softmax top-k (Qwen3-MoE).
    Softmax,
    /// Softmax, greedy or group-limited, scaled (DeepSeek-V2).
    SoftmaxGroups,
    /// Sigmoid with a correction bias, by groups (DeepSeek-V3).
    SigmoidCorrected,
    /// Sigmoid of an f32 gate with a correction bias, no groups, always normalized (MiniMax).
    SigmoidNormalized,
    /// Softmax, by groups ranked by their top-2 sum, optionally normalized, scaled (Mistral 4).
    SoftmaxGroupsByTwo,
    /// The top k of the (biased) router's logits, softmaxed among themselves (gpt-oss).
    TopLogitsSoftmax,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForwardKind {
    Dense,
    /// Routed experts, and `shared` always-on experts where the family has them.
    Moe {
        routing: RoutingKind,
        shared: Option<i32>,
    },
}

/// One layer, as its family declares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    pub norms: NormShape,
    pub activation: Activation,
    pub rope: RopeShape,
    pub attention: AttentionKind,
    pub span: AttentionSpan,
    pub scale: AttnScale,
    pub query_scaling: QueryScaling,
    pub qk_norm: Option<NormKind>,
    pub qk_norm_span: QkNormSpan,
    pub bias: AttnBias,
    pub mlp_bias: MlpBias,
    pub attn_softcap: SoftCap,
    pub feed_forward: FeedForwardKind,
}

impl LayerShape {
    /// A llama layer: pre RMS norms, SwiGLU, full rope over halves, global grouped-query
    /// attention, no biases. A family changes what it has.
    pub fn llama(rope: RopeScaling) -> LayerShape {
        LayerShape {
            norms: NormShape::PRE_RMS,
            activation: Activation::SwiGlu,
            rope: RopeShape {
                span: RopeSpan::Full,
                pairs: RopePairs::Halves,
                scaling: rope,
            },
            attention: AttentionKind::GroupedQuery,
            span: AttentionSpan::Global,
            scale: AttnScale::InvSqrtHeadDim,
            query_scaling: QueryScaling::None,
            qk_norm: None,
            qk_norm_span: QkNormSpan::PerHead,
            bias: AttnBias::None,
            mlp_bias: MlpBias::None,
            attn_softcap: SoftCap::None,
            feed_forward: FeedForwardKind::Dense,
        }
    }

    /// Refuses, naming it, the first feature the shared blocks do not build yet.
    pub fn check_implemented(&self) -> Result<()> {
        let missing = match *self {
            LayerShape {
                norms: NormShape { kind, .. },
                ..
            } if kind == NormKind::LayerNorm => format!("norm kind {kind:?}"),
            LayerShape {
                norms: NormShape { placement, .. },
                ..
            } if placement == NormPlacement::Post => format!("norm placement {placement:?}"),
            LayerShape {
                qk_norm: Some(kind),
                ..
            } if kind == NormKind::LayerNorm => format!("q/k norm kind {kind:?}"),
            LayerShape {
                attn_softcap: cap @ SoftCap::Tanh(_),
                ..
            } => format!("attention soft-capping {cap:?}"),
            // YaRN scales the rotated dims alone; the rope scales the whole head.
            LayerShape {
                rope:
                    RopeShape {
                        span: RopeSpan::Partial { .. },
                        scaling: RopeScaling::Yarn,
                        ..
                    },
                ..
            } => "YaRN over a partial rope".to_string(),
            LayerShape {
                span: AttentionSpan::Sliding { window, .. },
                ..
            } if window < 1 => {
                return Err(Error::Config(format!(
                    "sliding_window is {window}; it must be at least 1"
                )))
            }
            _ => return Ok(()),
        };
        Err(not_implemented(&missing))
    }

    /// The window, for a sliding layer.
    pub fn window(&self) -> Option<i32> {
        self.span.window()
    }
}

/// How the embedding's output is scaled before the first layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EmbedScale {
    None,
    /// Times `sqrt(hidden_size)`, rounded to bf16 as mlx-lm rounds it (Gemma).
    SqrtHidden,
}

/// The output projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    /// The embedding, transposed.
    Tied,
    /// Its own `lm_head`.
    Untied,
}

impl HeadKind {
    /// From config.json's `tie_word_embeddings`.
    pub fn tied(tied: bool) -> HeadKind {
        match tied {
            true => HeadKind::Tied,
            false => HeadKind::Untied,
        }
    }
}

/// The model around its layers: the embedding, the final norm and the head.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndShape {
    pub embed_scale: EmbedScale,
    pub final_norm: NormKind,
    pub head: HeadKind,
    pub logit_softcap: SoftCap,
}

impl EndShape {
    /// An unscaled embedding, an RMS final norm and no soft-capping, with `head`.
    pub fn plain(head: HeadKind) -> EndShape {
        EndShape {
            embed_scale: EmbedScale::None,
            final_norm: NormKind::Rms,
            head,
            logit_softcap: SoftCap::None,
        }
    }

    /// Refuses, naming it, the first feature the decoder does not build yet.
    pub fn check_implemented(&self) -> Result<()> {
        let missing = match *self {
            EndShape { final_norm, .. } if final_norm == NormKind::LayerNorm => {
                format!("final norm kind {final_norm:?}")
            }
            EndShape {
                logit_softcap: cap @ SoftCap::Tanh(_),
                ..
            } => format!("logit soft-capping {cap:?}"),
            _ => return Ok(()),
        };
        Err(not_implemented(&missing))
    }
}

/// A whole model as its family declares it: each layer's shape, and the ends around them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelShape {
    pub layers: Vec<LayerShape>,
    pub ends: EndShape,
}

impl ModelShape {
    /// `count` layers (checked first, so a huge count is an error, not an allocation), layer
    /// `i` of shape `layer(i)`; every layer and the ends refused where they need a feature the
    /// blocks lack.
    pub fn new(
        count: i32,
        ends: EndShape,
        layer: impl Fn(usize) -> LayerShape,
    ) -> Result<ModelShape> {
        let count = super::positive("num_hidden_layers", count, super::args::MAX_LAYERS)?;
        let layers: Vec<LayerShape> = (0..count as usize).map(layer).collect();
        for shape in &layers {
            shape.check_implemented()?;
        }
        ends.check_implemented()?;
        Ok(ModelShape { layers, ends })
    }

    /// The first layer's shape: a dense family's attention and rope, which every layer shares.
    pub fn first(&self) -> Result<LayerShape> {
        self.layers
            .first()
            .copied()
            .ok_or_else(|| Error::Config("the model has no layers".into()))
    }

    /// The distinct windows of the model's sliding layers, smallest first (none for a model
    /// of global layers): what decides whether a cached prefix can be reused exactly.
    pub fn windows(&self) -> Vec<i32> {
        let mut windows: Vec<i32> = self.layers.iter().filter_map(LayerShape::window).collect();
        windows.sort_unstable();
        windows.dedup();
        windows
    }

    /// Layer `i`'s shape.
    pub fn layer(&self, i: usize) -> Result<LayerShape> {
        self.layers.get(i).copied().ok_or_else(|| {
            Error::Internal(format!(
                "layer {i} is past the {} the shape declares",
                self.layers.len()
            ))
        })
    }
}

fn not_implemented(feature: &str) -> Error {
    Error::Config(format!("{feature} is not implemented yet"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_the_blocks_lack_is_refused_by_name() {
        let mut shape = LayerShape::llama(RopeScaling::None);
        assert!(shape.check_implemented().is_ok());
        shape.norms.kind = NormKind::LayerNorm;
        let err = shape.check_implemented().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("model config: norm kind LayerNorm is not implemented yet")
        );
        let mut shape = LayerShape::llama(RopeScaling::None);
        shape.activation = Activation::ClampedSwiGlu;
        shape.attention = AttentionKind::GroupedQuerySinks;
        assert!(shape.check_implemented().is_ok());
        shape.activation = Activation::GeGluTanh;
        shape.span = AttentionSpan::Sliding {
            window: 0,
            rope_base: None,
        };
        let err = shape.check_implemented().err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("sliding_window is 0")));
        let mut ends = EndShape::plain(HeadKind::Tied);
        assert!(ends.check_implemented().is_ok());
        ends.logit_softcap = SoftCap::Tanh(30.0);
        assert!(ends.check_implemented().is_err());
    }

    #[test]
    fn rope_scaling_kinds_by_name() -> Result<()> {
        let of = |v: Value| RopeScaling::of(Some(&v));
        assert_eq!(RopeScaling::of(None)?, RopeScaling::None);
        assert_eq!(
            of(serde_json::json!({"rope_type": "llama3"}))?,
            RopeScaling::Llama3
        );
        assert_eq!(
            of(serde_json::json!({"type": "deepseek_yarn"}))?,
            RopeScaling::Yarn
        );
        assert!(of(serde_json::json!({"type": "dynamic"})).is_err());
        Ok(())
    }
}
