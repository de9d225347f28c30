//! Qwen2 and Qwen2.5: Llama with biases on q/k/v.

use serde::Deserialize;
use serde_json::Value;

use super::common::{AttentionConfig, Decoder, DecoderConfig, Rope};
use super::{args, LanguageModel};
use crate::error::Result;
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
    #[serde(default = "default_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_traditional: bool,
    rope_scaling: Option<Value>,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_theta() -> f32 {
    1_000_000.0
}

fn yes() -> bool {
    true
}

pub fn build(config: &Value, w: &mut Weights) -> Result<Box<dyn LanguageModel>> {
    let a: Args = args(config)?;
    let head_dim = a.hidden_size / a.num_attention_heads;
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
            head_dim,
            qkv_bias: true,
            o_bias: false,
            qk_norm: false,
            rms_norm_eps: a.rms_norm_eps,
        },
        rope: Rope::new(
            head_dim,
            a.rope_theta,
            a.rope_traditional,
            a.rope_scaling.as_ref(),
        )?,
    };
    Ok(Box::new(Decoder::load(w, c)?))
}
