//! Ministral 3 (`ministral3`, and `mistral3`'s text model): Llama's layer with YaRN from
//! `rope_parameters`, Llama 4's query temperature, and `layer_types` marking sliding layers.

use serde::Deserialize;
use serde_json::Value;

use super::common::shape::{AttentionSpan, QueryScaling, RopeScaling};
use super::common::{yes, BaseArgs, Decoder, EndShape, FamilyTraits, HeadKind, LayerShape};
use super::common::{ModelShape, RankPart};
use super::{args, Transformer};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    #[serde(flatten)]
    base: BaseArgs,
    head_dim: Option<i32>,
    rope_parameters: Value,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
    layer_types: Option<Vec<String>>,
    sliding_window: Option<i32>,
}

impl Args {
    /// A number `rope_parameters` must carry, named when missing.
    fn rope_number(&self, key: &str) -> Result<f32> {
        self.rope_parameters
            .get(key)
            .and_then(Value::as_f64)
            .map(|v| v as f32)
            .ok_or_else(|| Error::Config(format!("rope_parameters has no number `{key}`")))
    }
}

/// Each layer as `layer_types` says (all global without it), the sliding ones over
/// `sliding_window`.
fn declare(a: &Args) -> Result<ModelShape> {
    let mut layer = LayerShape::llama(RopeScaling::of(Some(&a.rope_parameters))?);
    layer.query_scaling = QueryScaling::Llama4 {
        beta: a.rope_number("llama_4_scaling_beta")?,
        original: super::common::positive_f32(
            "rope_parameters.original_max_position_embeddings",
            a.rope_number("original_max_position_embeddings")?,
        )?,
    };
    let layers = a.base.num_hidden_layers.max(0) as usize;
    let spans = match &a.layer_types {
        None => vec![AttentionSpan::Global; layers],
        Some(types) if types.len() != layers => {
            return Err(Error::Config(format!(
                "layer_types lists {} layers; num_hidden_layers is {layers}",
                types.len()
            )))
        }
        Some(types) => (types.iter())
            .map(|t| span(t, a.sliding_window))
            .collect::<Result<_>>()?,
    };
    let ends = EndShape::plain(HeadKind::tied(a.tie_word_embeddings));
    ModelShape::new(a.base.num_hidden_layers, ends, |i| LayerShape {
        span: spans.get(i).copied().unwrap_or(AttentionSpan::Global),
        ..layer
    })
}

/// One `layer_types` entry's span.
pub(super) fn span(kind: &str, window: Option<i32>) -> Result<AttentionSpan> {
    match (kind, window) {
        ("full_attention", _) => Ok(AttentionSpan::Global),
        ("sliding_attention", Some(window)) => Ok(AttentionSpan::Sliding {
            window,
            rope_base: None,
        }),
        ("sliding_attention", None) => Err(Error::Config(
            "layer_types has sliding_attention layers but there is no sliding_window".into(),
        )),
        (other, _) => Err(Error::Config(format!(
            "layer_types entry `{}` is not full_attention or sliding_attention",
            crate::error::quote(other)
        ))),
    }
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let traits = FamilyTraits {
        head_dim: a.base.head_dim(a.head_dim)?,
        rope_theta: a.rope_number("rope_theta")?,
        shape: declare(&a)?,
    };
    let c = a.base.decoder(traits, Some(&a.rope_parameters))?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}
