//! gpt-oss (gpt-oss-20b, gpt-oss-120b): sliding-window layers between full ones, attention
//! sinks, biases on every projection, YaRN, and a mixture of experts in every layer with a
//! biased router and gpt-oss's clamped SwiGLU. Hugging Face's MXFP4 checkpoints are mapped
//! as mlx-lm's `sanitize` maps them.

use mlx_rs::{Array, Dtype};
use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{
    Activation, AttentionKind, AttnBias, FeedForwardKind, MlpBias, RopeScaling, RoutingKind,
};
use super::common::{
    keys, positive, BaseArgs, Decoder, DecoderConfig, DecoderLayer, EndShape, FamilyTraits,
    FeedForward, HeadKind, LayerShape, ModelShape, Moe, MoeLayout, MoeSizes, RankPart, Routing,
    TensorCut, MAX_EXPERTS,
};
use super::{args, ministral3, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

/// mlx-lm's `gpt_oss.ModelArgs`, with its defaults.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    num_hidden_layers: i32,
    num_local_experts: i32,
    num_experts_per_tok: i32,
    vocab_size: i32,
    rms_norm_eps: f32,
    hidden_size: i32,
    intermediate_size: i32,
    head_dim: i32,
    num_attention_heads: i32,
    num_key_value_heads: i32,
    sliding_window: i32,
    rope_theta: f32,
    rope_scaling: Option<Value>,
    layer_types: Option<Vec<String>>,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            num_hidden_layers: 36,
            num_local_experts: 128,
            num_experts_per_tok: 4,
            vocab_size: 201088,
            rms_norm_eps: 1e-5,
            hidden_size: 2880,
            intermediate_size: 2880,
            head_dim: 64,
            num_attention_heads: 64,
            num_key_value_heads: 8,
            sliding_window: 128,
            rope_theta: 150000.0,
            rope_scaling: None,
            layer_types: None,
        }
    }
}

impl Args {
    fn base(&self) -> BaseArgs {
        BaseArgs {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            rms_norm_eps: self.rms_norm_eps,
            vocab_size: self.vocab_size,
            num_key_value_heads: Some(self.num_key_value_heads),
            rope_scaling: self.rope_scaling.clone(),
        }
    }

    fn validate(&self) -> Result<()> {
        let experts = positive("num_local_experts", self.num_local_experts, MAX_EXPERTS)?;
        positive("num_experts_per_tok", self.num_experts_per_tok, experts)?;
        Ok(())
    }

    /// `layer_types`, or mlx-lm's default: sliding and full layers in turn (an even count).
    fn layer_types(&self) -> Result<Vec<String>> {
        let layers = self.num_hidden_layers.max(0) as usize;
        let types = match &self.layer_types {
            Some(types) => types.clone(),
            None => (0..layers / 2)
                .flat_map(|_| ["sliding_attention", "full_attention"])
                .map(str::to_string)
                .collect(),
        };
        match types.len() == layers {
            true => Ok(types),
            false => Err(Error::Config(format!(
                "layer_types lists {} layers (sliding and full in turn when absent); \
                 num_hidden_layers is {layers}",
                types.len()
            ))),
        }
    }

    /// Every layer: sinks, biases on q/k/v/o, YaRN, the clamped SwiGLU experts routed by the
    /// top logits; sliding over `sliding_window` where `layer_types` says.
    fn declare(&self) -> Result<ModelShape> {
        self.validate()?;
        let mut layer = LayerShape::llama(RopeScaling::of(self.rope_scaling.as_ref())?);
        layer.attention = AttentionKind::GroupedQuerySinks;
        layer.bias = AttnBias::QkvO;
        layer.activation = Activation::ClampedSwiGlu;
        layer.mlp_bias = MlpBias::All;
        layer.feed_forward = FeedForwardKind::Moe {
            routing: RoutingKind::TopLogitsSoftmax,
            shared: None,
        };
        let spans = (self.layer_types()?.iter())
            .map(|t| ministral3::span(t, Some(self.sliding_window)))
            .collect::<Result<Vec<_>>>()?;
        let ends = EndShape::plain(HeadKind::Untied);
        ModelShape::new(self.num_hidden_layers, ends, |i| LayerShape {
            span: spans.get(i).copied().unwrap_or(layer.span),
            ..layer
        })
    }
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    args::<Args>(config)?.declare()
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let traits = FamilyTraits {
        head_dim: a.head_dim,
        rope_theta: a.rope_theta,
        shape: a.declare()?,
    };
    let c = a.base().decoder(traits, a.rope_scaling.as_ref())?;
    let mut skeleton = c.skeleton();
    // Every layer's feed-forward is the mixture: its cut replaces a dense MLP's.
    skeleton
        .tensor_counts
        .retain(|(what, _)| *what != "MLP neurons");
    let (experts, inter) = (a.num_local_experts, a.intermediate_size);
    skeleton
        .tensor_counts
        .push(TensorCut::expert_count(&part.tensor, experts, inter));
    let decoder = Decoder::assemble(w, &skeleton, part, &|w, prefix, i, tensor| {
        layer(w, (prefix, i), (&a, &c), tensor)
    })?;
    Ok(Box::new(decoder))
}

/// Layer `index`: attention with sinks, and the mixture at `mlp.router` / `mlp.experts`.
fn layer(
    w: &mut Weights,
    (prefix, index): (&str, usize),
    (a, c): (&Args, &DecoderConfig),
    tensor: &Option<TensorCut>,
) -> Result<DecoderLayer> {
    let hidden = c.attention.hidden_size;
    let shape = c.shape.layer(index)?;
    let attention = c.attention(w, (prefix, &shape), tensor)?;
    let sizes = MoeSizes {
        hidden,
        inter: a.intermediate_size,
        experts: a.num_local_experts,
        shared: None,
    };
    let routing = Routing::TopLogits {
        top_k: a.num_experts_per_tok,
    };
    let layout = MoeLayout {
        router: "router",
        experts: "experts",
        bias: true,
        activation: Activation::ClampedSwiGlu,
    };
    let mlp = format!("{prefix}.mlp");
    let moe = Moe::load_laid_out(w, (&mlp, layout), (sizes, routing), false, tensor)?;
    let norms = (hidden, c.attention.rms_norm_eps);
    let ffn = FeedForward::Moe(Box::new(moe));
    DecoderLayer::new(w, prefix, norms, shape, (attention, ffn))
}

/// Hugging Face's layout as mlx-lm's `sanitize` maps it (a checkpoint with `gate_proj.weight`
/// is mlx-lm's already): `*_blocks` (MXFP4 codes, bytes) viewed as `uint32` words and renamed
/// `.weight`, `*_scales` renamed `.scales`, and the fused `gate_up_proj` (its weight, scales
/// and `_bias`) split into gate and up by alternate rows.
pub fn sanitize(_config: &Value, w: &mut Weights) -> Result<()> {
    if w.keys().any(|k| k.contains("gate_proj.weight")) {
        return Ok(());
    }
    let experts: Vec<String> = (w.keys())
        .filter(|k| keys::layer_of(k).is_some() && k.contains(".mlp.experts."))
        .filter(|k| k.contains("gate_up_proj") || k.contains("down_proj"))
        .cloned()
        .collect();
    for key in experts {
        let mut v = w.take_unchecked(&key)?;
        let mut name = key.clone();
        if name.ends_with("_blocks") {
            v = words(&key, &v)?;
            name = name.replace("_blocks", ".weight");
        }
        name = name.replace("_scales", ".scales").replace("_bias", ".bias");
        match name.contains("gate_up_proj") {
            true => {
                let (gate, up) = alternate_rows(&key, &v)?;
                w.insert(&name.replace("gate_up_proj", "gate_proj"), gate);
                w.insert(&name.replace("gate_up_proj", "up_proj"), up);
            }
            false => w.insert(&name, v),
        }
    }
    Ok(())
}

/// MXFP4 blocks `[..., groups, 16]` of bytes as `[..., groups * 4]` words (mlx-lm's
/// `v.view(mx.uint32).flatten(-2)`).
fn words(key: &str, v: &Array) -> Result<Array> {
    let nd = v.ndim() as i32;
    if v.dtype() != Dtype::Uint8 || nd < 2 || v.shape()[v.ndim() - 1] % 4 != 0 {
        return Err(Error::Weights(format!(
            "`{key}` is {:?} {:?}; MXFP4 blocks are uint8 with a last axis of a multiple of 4",
            v.dtype(),
            v.shape()
        )));
    }
    Ok(v.view_dtype(Dtype::Uint32)?.flatten(nd - 2, nd - 1)?)
}

/// Even and odd rows (the axis before the last for a matrix, the last for a bias) of a fused
/// gate/up tensor: gate and up, interleaved as gpt-oss stores them.
fn alternate_rows(key: &str, v: &Array) -> Result<(Array, Array)> {
    let is_bias = key.ends_with("_bias");
    let axis = v.ndim() as i32 - if is_bias { 1 } else { 2 };
    let rows = match axis >= 0 {
        true => v.shape()[axis as usize],
        false => 0,
    };
    if rows < 2 || rows % 2 != 0 {
        return Err(Error::Weights(format!(
            "`{key}` has shape {:?}; gate and up rows must alternate along an even axis",
            v.shape()
        )));
    }
    let pick = |start: i32| -> Result<Array> {
        let idx = Array::arange::<i32, i32>(start, rows, 2)?;
        Ok(v.take_axis(&idx, axis)?)
    };
    Ok((pick(0)?, pick(1)?))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use mlx_rs::ops::indexing::IndexOp;

    use super::*;
    use crate::models::common::layer_node_supports;
    use crate::models::common::shape::AttentionSpan;
    use crate::weights::WeightMode;

    fn tiny(extra: Value) -> Value {
        let mut config = json!({"model_type": "gpt_oss", "hidden_size": 64, "head_dim": 32,
            "intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 4, "num_local_experts": 8, "num_experts_per_tok": 2,
            "sliding_window": 8, "vocab_size": 49152,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                "beta_slow": 1.0, "original_max_position_embeddings": 4096}});
        for (k, v) in extra.as_object().into_iter().flatten() {
            config[k] = v.clone();
        }
        config
    }

    #[test]
    fn sliding_and_full_layers_in_turn_with_sinks_run_op_by_op() -> Result<()> {
        let layers = shape(&tiny(json!({})))?.layers;
        let windows: Vec<Option<i32>> = layers.iter().map(|l| l.window()).collect();
        assert_eq!(windows, [Some(8), None, Some(8), None]);
        for l in &layers {
            assert_eq!(l.attention, AttentionKind::GroupedQuerySinks);
            assert_eq!(l.activation, Activation::ClampedSwiGlu);
            assert_eq!(l.bias, AttnBias::QkvO);
            assert_eq!(l.rope.scaling, RopeScaling::Yarn);
            assert!(!layer_node_supports(l), "the one-node layer has no sinks");
        }
        let types = json!({"layer_types": ["full_attention", "full_attention",
            "sliding_attention", "full_attention"]});
        let layers = shape(&tiny(types))?.layers;
        assert_eq!(layers[0].span, AttentionSpan::Global);
        Ok(())
    }

    /// gpt-oss-20b's own config.json (its fields mlx-lm ignores included) declares 24
    /// layers, sliding over 128 and full in turn.
    #[test]
    fn gpt_oss_20b_config_declares_its_layers() -> Result<()> {
        let types: Vec<&str> = (0..12)
            .flat_map(|_| ["sliding_attention", "full_attention"])
            .collect();
        let config = json!({"architectures": ["GptOssForCausalLM"], "attention_bias": true,
            "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
            "initial_context_length": 4096, "intermediate_size": 2880, "layer_types": types,
            "max_position_embeddings": 131072, "model_type": "gpt_oss",
            "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
            "num_key_value_heads": 8, "num_local_experts": 32,
            "quantization_config": {"quant_method": "mxfp4"}, "rms_norm_eps": 1e-05,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
            "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0,
            "tie_word_embeddings": false, "vocab_size": 201088});
        let model = shape(&config)?;
        assert_eq!(model.layers.len(), 24);
        assert_eq!(model.windows(), [128]);
        assert_eq!(model.layers[23].window(), None);
        assert_eq!(model.ends.head, HeadKind::Untied);
        Ok(())
    }

    #[test]
    fn bad_layer_types_and_expert_counts_are_refused_by_name() {
        let err = |extra: Value| shape(&tiny(extra)).err().map(|e| e.to_string());
        let short = err(json!({"layer_types": ["sliding_attention"]}));
        assert!(short.is_some_and(|e| e.contains("layer_types lists 1 layers")));
        let odd = err(json!({"num_hidden_layers": 3}));
        assert!(odd.is_some_and(|e| e.contains("layer_types")));
        let bad = err(
            json!({"layer_types": ["sliding_attention", "full_attention",
            "local", "full_attention"]}),
        );
        assert!(bad.is_some_and(|e| e.contains("`local`")));
        let k = err(json!({"num_experts_per_tok": 9}));
        assert!(k.is_some_and(|e| e.contains("num_experts_per_tok")));
        let experts = err(json!({"num_local_experts": 0}));
        assert!(experts.is_some_and(|e| e.contains("num_local_experts")));
    }

    /// Hugging Face's MXFP4 layout: blocks viewed as words, gate and up from alternate rows of
    /// the fused weight, scales and bias; down renamed.
    #[test]
    fn hugging_face_mxfp4_experts_map_as_mlx_lm_maps_them() -> Result<()> {
        let (experts, rows, hidden) = (2, 4, 3);
        let bytes: Vec<u8> = (0..experts * rows * 16).map(|i| i as u8).collect();
        let p = "model.layers.0.mlp.experts";
        let tensors = HashMap::from([
            (
                format!("{p}.gate_up_proj_blocks"),
                Array::from_slice(&bytes, &[experts, rows, 1, 16]),
            ),
            (
                format!("{p}.gate_up_proj_scales"),
                Array::from_slice(&[1u8, 2, 3, 4, 5, 6, 7, 8], &[experts, rows, 1]),
            ),
            (
                format!("{p}.gate_up_proj_bias"),
                Array::from_slice(&[0.0f32, 1., 2., 3., 4., 5., 6., 7.], &[experts, rows]),
            ),
            (
                format!("{p}.down_proj_blocks"),
                Array::from_slice(
                    &bytes[..(experts * hidden * 16) as usize],
                    &[experts, hidden, 1, 16],
                ),
            ),
            (
                format!("{p}.down_proj_bias"),
                Array::from_slice(&[0.0f32; 6], &[experts, hidden]),
            ),
        ]);
        let mut w = Weights::from_arrays(tensors, &json!({}), WeightMode::AsStored)?;
        sanitize(&json!({}), &mut w)?;
        let mut keys: Vec<&String> = w.keys().collect();
        keys.sort();
        let names = [
            "down_proj.bias",
            "down_proj.weight",
            "gate_proj.bias",
            "gate_proj.scales",
        ];
        let names = names
            .into_iter()
            .chain(["gate_proj.weight", "up_proj.bias"]);
        let names = names.chain(["up_proj.scales", "up_proj.weight"]);
        let want: Vec<String> = names.map(|n| format!("{p}.{n}")).collect();
        assert_eq!(keys, want.iter().collect::<Vec<_>>());
        let gate = w.take_unchecked(&format!("{p}.gate_proj.weight"))?;
        let up = w.take_unchecked(&format!("{p}.up_proj.weight"))?;
        assert_eq!(
            (gate.shape(), gate.dtype()),
            (&[2, 2, 4][..], Dtype::Uint32)
        );
        // Row 0's first word is bytes 0..4, row 1's (up's first) bytes 16..20, little-endian.
        let word = |a: &Array, i: i32| {
            a.flatten(None, None)
                .map(|f| f.index(i).item_exact::<u32>())
        };
        assert_eq!(word(&gate, 0)?, u32::from_le_bytes([0, 1, 2, 3]));
        assert_eq!(word(&up, 0)?, u32::from_le_bytes([16, 17, 18, 19]));
        let bias = w.take_unchecked(&format!("{p}.up_proj.bias"))?;
        let values = |a: &Array| a.flatten(None, None)?.contiguous();
        let bias = values(&bias)?;
        assert_eq!(bias.try_as_slice::<f32>(), Ok(&[1.0, 3.0, 5.0, 7.0][..]));
        let scales = w.take_unchecked(&format!("{p}.gate_proj.scales"))?;
        let scales = values(&scales)?;
        assert_eq!(scales.try_as_slice::<u8>(), Ok(&[1, 3, 5, 7][..]));
        let down = w.take_unchecked(&format!("{p}.down_proj.weight"))?;
        assert_eq!(down.shape(), [2, 3, 4]);
        Ok(())
    }
}
