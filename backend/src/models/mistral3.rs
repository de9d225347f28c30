//! Mistral 3 (`mistral3`): a text model under `language_model`, vision dropped. Its text
//! model is `ministral3`, `mistral4` (latent attention with experts) or `llama`, as
//! `text_config.model_type` says.

use serde_json::{json, Value};

use super::common::{ModelShape, RankPart};
use super::{llama, ministral3, mistral4, Transformer};
use crate::error::Result;
use crate::weights::Weights;

/// The text model families `mistral3` wraps.
enum TextModel {
    Ministral3,
    Mistral4,
    Llama,
}

fn text_model(config: &Value) -> TextModel {
    match config["model_type"].as_str() {
        Some("ministral3") => TextModel::Ministral3,
        Some("mistral4") => TextModel::Mistral4,
        _ => TextModel::Llama,
    }
}

/// The shape `config` (the text config) declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    match text_model(config) {
        TextModel::Ministral3 => ministral3::shape(config),
        TextModel::Mistral4 => mistral4::shape(config),
        TextModel::Llama => llama::shape(config),
    }
}

/// The text model's own key mapping (Mistral 4's experts).
pub fn sanitize(config: &Value, w: &mut Weights) -> Result<()> {
    match text_model(config) {
        TextModel::Mistral4 => mistral4::sanitize(config, w),
        TextModel::Ministral3 | TextModel::Llama => Ok(()),
    }
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    match text_model(config) {
        TextModel::Ministral3 => ministral3::build(config, w, part),
        TextModel::Mistral4 => mistral4::build(config, w, part),
        TextModel::Llama => llama::build(config, w, part),
    }
}

/// mlx-lm's `mistral3.ModelArgs`: an untied head unless the text config says.
pub fn complete(_: &Value, text: &mut Value) {
    if text.get("tie_word_embeddings").is_none() {
        text["tie_word_embeddings"] = json!(false);
    }
}
