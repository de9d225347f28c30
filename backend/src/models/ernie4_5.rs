//! ERNIE 4.5 dense (`ernie4_5`): Llama's layer with adjacent-pair rope and `use_bias` on every
//! projection.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{AttnBias, MlpBias, RopePairs, RopeScaling};
use super::common::{BaseArgs, Decoder, EndShape, FamilyTraits, HeadKind, LayerShape};
use super::common::{ModelShape, RankPart};
use super::{args, Transformer};
use crate::error::Result;
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: Option<i32>,
    rope_theta: f32,
    use_bias: bool,
    tie_word_embeddings: bool,
}

fn declare(a: &Args) -> Result<ModelShape> {
    let mut layer = LayerShape::llama(RopeScaling::None);
    layer.rope.pairs = RopePairs::Adjacent;
    layer.bias = AttnBias::all(a.use_bias);
    layer.mlp_bias = MlpBias::of(a.use_bias);
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
    let c = a.base.decoder(traits, None)?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}
