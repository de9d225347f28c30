//! Model families, one small file each, picked by `model_type` from config.json.

pub mod common;
mod llama;
mod qwen2;
mod qwen3;

use mlx_rs::Array;
use serde_json::Value;

use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::weights::Weights;
use common::Decoder;

/// What the engine needs from a loaded model.
pub trait LanguageModel {
    /// Token ids [B, L] to logits [B, L, vocab], extending `caches` (one per layer).
    fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array>;
    fn num_layers(&self) -> usize;
    /// Every parameter, to evaluate once at load.
    fn arrays(&self) -> Vec<&Array>;
}

impl LanguageModel for Decoder {
    fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array> {
        Decoder::forward(self, inputs, caches)
    }
    fn num_layers(&self) -> usize {
        self.layers.len()
    }
    fn arrays(&self) -> Vec<&Array> {
        Decoder::arrays(self)
    }
}

type Builder = fn(&Value, &mut Weights) -> Result<Box<dyn LanguageModel>>;

/// The registry: `model_type` to the family's builder.
const FAMILIES: &[(&str, Builder)] = &[
    ("llama", llama::build),
    ("mistral", llama::build),
    ("qwen2", qwen2::build),
    ("qwen3", qwen3::build),
];

/// Builds the model that `config` describes from `weights`, strictly: every checkpoint
/// key must be used, except rotary caches and a tied `lm_head`.
pub fn build(config: &Value, mut weights: Weights) -> Result<Box<dyn LanguageModel>> {
    let model_type = config["model_type"]
        .as_str()
        .ok_or_else(|| Error::Config("config.json has no model_type".into()))?;
    let (_, builder) = FAMILIES
        .iter()
        .find(|(name, _)| *name == model_type)
        .ok_or_else(|| {
            let names: Vec<&str> = FAMILIES.iter().map(|(n, _)| *n).collect();
            Error::UnsupportedModel(model_type.to_string(), names.join(", "))
        })?;
    let model = builder(config, &mut weights)?;
    let tied = config["tie_word_embeddings"].as_bool().unwrap_or(true);
    weights.finish(|key| {
        key.contains("rotary_emb.inv_freq") || (tied && key.starts_with("lm_head."))
    })?;
    mlx_rs::transforms::eval(model.arrays())?;
    Ok(model)
}

/// Parses the family's argument struct from config.json, naming the field on error.
fn args<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T> {
    T::deserialize(config).map_err(|e| Error::Config(e.to_string()))
}
