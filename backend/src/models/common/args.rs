//! The config.json fields every decoder family shares, and the decoder config they make.

use serde::Deserialize;
use serde_json::Value;

use super::{AttentionConfig, DecoderConfig, Rope};
use crate::error::Result;

#[derive(Deserialize)]
pub struct BaseArgs {
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub num_key_value_heads: Option<i32>,
    pub rope_scaling: Option<Value>,
}

/// What differs between families, beyond the shared fields.
pub struct FamilyTraits {
    pub head_dim: i32,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub qk_norm: bool,
    pub mlp_bias: bool,
    pub tie_word_embeddings: bool,
    pub rope_theta: f32,
    pub rope_traditional: bool,
}

impl BaseArgs {
    /// `hidden_size / num_attention_heads`, for families without an explicit head_dim.
    pub fn default_head_dim(&self) -> i32 {
        self.hidden_size / self.num_attention_heads
    }

    pub fn decoder(&self, t: FamilyTraits, rope_scaling: Option<&Value>) -> Result<DecoderConfig> {
        Ok(DecoderConfig {
            vocab_size: self.vocab_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            mlp_bias: t.mlp_bias,
            tie_word_embeddings: t.tie_word_embeddings,
            attention: AttentionConfig {
                hidden_size: self.hidden_size,
                heads: self.num_attention_heads,
                kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
                head_dim: t.head_dim,
                qkv_bias: t.qkv_bias,
                o_bias: t.o_bias,
                qk_norm: t.qk_norm,
                rms_norm_eps: self.rms_norm_eps,
            },
            rope: Rope::new(t.head_dim, t.rope_theta, t.rope_traditional, rope_scaling)?,
        })
    }
}

pub fn yes() -> bool {
    true
}
