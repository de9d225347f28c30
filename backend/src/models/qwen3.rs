//! Qwen3: no biases, RMS norms on each q and k head, explicit head_dim.

use serde::Deserialize;
use serde_json::Value;

use super::common::{BaseArgs, Decoder, DecoderConfig, FamilyTraits, RankPart};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
pub struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: i32,
    tie_word_embeddings: bool,
    rope_theta: Option<f32>,
    /// transformers >= 5 nests rope_theta and rope_scaling here.
    rope_parameters: Option<Value>,
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    Ok(Box::new(Decoder::load(
        w,
        decoder_config(&args(config)?)?,
        part,
    )?))
}

/// Qwen3's decoder (Qwen3-MoE's attention and dense layers too).
pub fn decoder_config(a: &Args) -> Result<DecoderConfig> {
    let nested = a.rope_parameters.as_ref();
    let rope_theta = a
        .rope_theta
        .or_else(|| {
            nested
                .and_then(|p| p["rope_theta"].as_f64())
                .map(|t| t as f32)
        })
        .ok_or_else(|| Error::Config("rope_theta is missing from the model config".into()))?;
    let traits = FamilyTraits {
        qk_norm: true,
        tie_word_embeddings: a.tie_word_embeddings,
        ..FamilyTraits::new(a.head_dim, rope_theta)
    };
    a.base
        .decoder(traits, a.base.rope_scaling.as_ref().or(nested))
}
