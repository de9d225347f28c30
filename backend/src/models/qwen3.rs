//! Qwen3: no biases, RMS norms on each q and k head, explicit head_dim.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{FeedForwardKind, NormKind, RopeScaling};
use super::common::{BaseArgs, Decoder, DecoderConfig, EndShape, FamilyTraits, HeadKind};
use super::common::{LayerShape, ModelShape, RankPart};
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

impl Args {
    /// `rope_scaling`, or transformers 5's nested `rope_parameters`.
    fn rope_scaling(&self) -> Option<&Value> {
        self.base
            .rope_scaling
            .as_ref()
            .or(self.rope_parameters.as_ref())
    }
}

/// Llama's layer with RMS q/k norms; layer `i`'s feed-forward block is `feed_forward(i)`
/// (dense throughout for Qwen3, experts in Qwen3-MoE's sparse layers).
pub fn declare(a: &Args, feed_forward: impl Fn(usize) -> FeedForwardKind) -> Result<ModelShape> {
    let mut layer = LayerShape::llama(RopeScaling::of(a.rope_scaling())?);
    layer.qk_norm = Some(NormKind::Rms);
    let ends = EndShape::plain(HeadKind::tied(a.tie_word_embeddings));
    ModelShape::new(a.base.num_hidden_layers, ends, |i| LayerShape {
        feed_forward: feed_forward(i),
        ..layer
    })
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?, |_| FeedForwardKind::Dense)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let shape = declare(&a, |_| FeedForwardKind::Dense)?;
    Ok(Box::new(Decoder::load(
        w,
        decoder_config(&a, shape)?,
        part,
    )?))
}

/// Qwen3's decoder (Qwen3-MoE's attention and dense layers too), of `shape`.
pub fn decoder_config(a: &Args, shape: ModelShape) -> Result<DecoderConfig> {
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
        head_dim: a.head_dim,
        rope_theta,
        shape,
    };
    a.base.decoder(traits, a.rope_scaling())
}
