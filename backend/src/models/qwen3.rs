//! Qwen3: no biases, RMS norms on each q and k head, explicit head_dim.

use serde::Deserialize;
use serde_json::Value;

use super::common::{AttentionConfig, Decoder, DecoderConfig, Rope};
use super::{args, LanguageModel};
use crate::error::{Error, Result};
use crate::weights::Weights;

#[derive(Deserialize)]
struct Args {
    hidden_size: i32,
    num_hidden_layers: i32,
    intermediate_size: i32,
    num_attention_heads: i32,
    rms_norm_eps: f32,
    vocab_size: i32,
    num_key_value_heads: i32,
    head_dim: i32,
    tie_word_embeddings: bool,
    rope_theta: Option<f32>,
    rope_scaling: Option<Value>,
    /// transformers >= 5 nests rope_theta and rope_scaling here.
    rope_parameters: Option<Value>,
}

pub fn build(config: &Value, w: &mut Weights) -> Result<Box<dyn LanguageModel>> {
    let a: Args = args(config)?;
    let nested = a.rope_parameters.as_ref();
    let theta = a
        .rope_theta
        .or_else(|| {
            nested
                .and_then(|p| p["rope_theta"].as_f64())
                .map(|t| t as f32)
        })
        .ok_or_else(|| Error::Config("rope_theta is missing from the model config".into()))?;
    let scaling = a.rope_scaling.as_ref().or(nested);
    let c = DecoderConfig {
        vocab_size: a.vocab_size,
        num_hidden_layers: a.num_hidden_layers,
        intermediate_size: a.intermediate_size,
        mlp_bias: false,
        tie_word_embeddings: a.tie_word_embeddings,
        attention: AttentionConfig {
            hidden_size: a.hidden_size,
            heads: a.num_attention_heads,
            kv_heads: a.num_key_value_heads,
            head_dim: a.head_dim,
            qkv_bias: false,
            o_bias: false,
            qk_norm: true,
            rms_norm_eps: a.rms_norm_eps,
        },
        rope: Rope::new(a.head_dim, theta, false, scaling)?,
    };
    Ok(Box::new(Decoder::load(w, c)?))
}
