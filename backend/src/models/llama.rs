//! Llama 2/3.x, SmolLM2 and Mistral-style checkpoints.

use serde::Deserialize;
use serde_json::Value;

use super::args;
use super::common::shape::{AttnBias, MlpBias, RopePairs, RopeScaling};
use super::common::{yes, BaseArgs, Decoder, EndShape, FamilyTraits, HeadKind, LayerShape};
use super::common::{ModelShape, RankPart};
use super::Transformer;
use crate::error::Result;
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: Option<i32>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "default_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_traditional: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_theta() -> f32 {
    10000.0
}

/// Every layer alike: llama's, with `attention_bias` on all four projections.
fn declare(a: &Args) -> Result<ModelShape> {
    let mut layer = LayerShape::llama(RopeScaling::of(a.base.rope_scaling.as_ref())?);
    layer.rope.pairs = RopePairs::traditional(a.rope_traditional);
    layer.bias = AttnBias::all(a.attention_bias);
    layer.mlp_bias = MlpBias::of(a.mlp_bias);
    let ends = EndShape::plain(HeadKind::tied(a.tie_word_embeddings));
    ModelShape::new(a.base.num_hidden_layers, ends, |_| layer)
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let traits = FamilyTraits {
        head_dim: a.base.head_dim(a.head_dim)?,
        rope_theta: a.rope_theta,
        shape: declare(&a)?,
    };
    let c = a.base.decoder(traits, a.base.rope_scaling.as_ref())?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}
