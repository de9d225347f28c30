//! Llama 2/3.x, SmolLM2 and Mistral-style checkpoints.

use serde::Deserialize;
use serde_json::Value;

use super::args;
use super::common::{yes, BaseArgs, Decoder, FamilyTraits, RankPart};
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

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let head_dim = match a.head_dim {
        Some(d) => d,
        None => a.base.default_head_dim()?,
    };
    let traits = FamilyTraits {
        qkv_bias: a.attention_bias,
        o_bias: a.attention_bias,
        mlp_bias: a.mlp_bias,
        tie_word_embeddings: a.tie_word_embeddings,
        rope_traditional: a.rope_traditional,
        ..FamilyTraits::new(head_dim, a.rope_theta)
    };
    let c = a.base.decoder(traits, a.base.rope_scaling.as_ref())?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}
