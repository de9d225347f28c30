//! GLM-4 (`glm4`, GLM-4-0414): partial rotary over adjacent pairs, norms after each block as
//! well as before (`post_self_attn_layernorm`, `post_mlp_layernorm`), q/k/v biases, and a fused
//! `gate_up_proj` split into gate and up at load.

use mlx_rs::ops::indexing::IndexOp;
use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{
    AttnBias, NormKind, NormPlacement, NormShape, RopePairs, RopeScaling, RopeSpan, SandwichKeys,
};
use super::common::{keys, ModelShape, RankPart};
use super::common::{BaseArgs, Decoder, EndShape, FamilyTraits, HeadKind, LayerShape};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: i32,
    attention_bias: bool,
    partial_rotary_factor: f32,
    rope_theta: f32,
    #[serde(default = "super::common::yes")]
    rope_traditional: bool,
}

/// Llama's layer with sandwich norms, partial adjacent-pair rope and q/k/v biases; the head is
/// always its own.
fn declare(a: &Args) -> Result<ModelShape> {
    let fraction = a.partial_rotary_factor;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(Error::Config(format!(
            "partial_rotary_factor is {fraction}; it must be in (0, 1]"
        )));
    }
    let mut layer = LayerShape::llama(RopeScaling::None);
    layer.norms = NormShape {
        kind: NormKind::Rms,
        placement: NormPlacement::Sandwich(SandwichKeys::Glm),
    };
    layer.rope.span = RopeSpan::Partial { fraction };
    layer.rope.pairs = RopePairs::traditional(a.rope_traditional);
    if a.attention_bias {
        layer.bias = AttnBias::Qkv;
    }
    let ends = EndShape::plain(HeadKind::Untied);
    ModelShape::new(a.base.num_hidden_layers, ends, |_| layer)
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let shape = declare(&a)?;
    if shape.first()?.rope.dims(a.head_dim) % 2 != 0 {
        return Err(Error::Config(format!(
            "partial_rotary_factor {} of head_dim {} rotates an odd number of dims",
            a.partial_rotary_factor, a.head_dim
        )));
    }
    let traits = FamilyTraits {
        head_dim: a.head_dim,
        rope_theta: a.rope_theta,
        shape,
    };
    let c = a.base.decoder(traits, None)?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}

/// Splits each layer's fused `mlp.gate_up_proj` (gate rows, then up rows; codes, scales and
/// biases alike) into `gate_proj` and `up_proj`, as mlx-lm's `mx.split(x, 2, -1)` reads it.
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    let a: Args = args(config)?;
    let inter = a.base.intermediate_size;
    let fused: Vec<String> = (w.keys())
        .filter(|k| keys::layer_of(k).is_some() && k.contains(".mlp.gate_up_proj."))
        .cloned()
        .collect();
    for key in fused {
        let array = w.take_unchecked(&key)?;
        if array.ndim() < 1 || array.shape()[0] != 2 * inter {
            return Err(Error::Weights(format!(
                "`{key}` has shape {:?}; its first axis must be 2 * intermediate_size ({})",
                array.shape(),
                2 * inter
            )));
        }
        w.insert(
            &key.replace("gate_up_proj", "gate_proj"),
            array.index(..inter),
        );
        w.insert(
            &key.replace("gate_up_proj", "up_proj"),
            array.index(inter..),
        );
    }
    Ok(())
}
