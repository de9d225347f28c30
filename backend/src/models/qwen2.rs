//! Qwen2 and Qwen2.5: Llama with biases on q/k/v.

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
    #[serde(default = "default_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_traditional: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_theta() -> f32 {
    1_000_000.0
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let traits = FamilyTraits {
        qkv_bias: true,
        tie_word_embeddings: a.tie_word_embeddings,
        rope_traditional: a.rope_traditional,
        ..FamilyTraits::new(a.base.default_head_dim()?, a.rope_theta)
    };
    let c = a.base.decoder(traits, a.base.rope_scaling.as_ref())?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}
