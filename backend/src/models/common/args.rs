//! The config.json fields every decoder family shares, and the decoder config they make.

use serde::Deserialize;
use serde_json::Value;

use super::shape::{AttentionSpan, AttnScale, ModelShape};
use super::{AttentionConfig, DecoderConfig, Rope};
use crate::error::{Error, Result};

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

/// What differs between families beyond the shared fields: head size, rope base, and the
/// shape the family declares.
pub struct FamilyTraits {
    pub head_dim: i32,
    pub rope_theta: f32,
    pub shape: ModelShape,
}

/// Upper bounds on config sizes, far above any real model (DeepSeek-V3: hidden 7,168, 61
/// layers, vocab 129,280) and low enough that no shape built from them overflows an i32.
const MAX_HIDDEN: i32 = 1 << 16;
const MAX_INTERMEDIATE: i32 = 1 << 20;
pub(super) const MAX_LAYERS: i32 = 1 << 12;
const MAX_HEADS: i32 = 1 << 10;
const MAX_HEAD_DIM: i32 = 1 << 12;
const MAX_VOCAB: i32 = 1 << 22;

/// `value` if it is in `1..=max`, else an error naming the field.
pub fn positive(field: &str, value: i32, max: i32) -> Result<i32> {
    match value {
        v if v < 1 => Err(Error::Config(format!(
            "{field} is {v}; it must be at least 1"
        ))),
        v if v > max => Err(Error::Config(format!(
            "{field} is {v}, more than the {max} this backend accepts"
        ))),
        v => Ok(v),
    }
}

/// A rotary span (`field`): positive, at most 4096, and even (rope rotates pairs).
pub fn rope_dim(field: &str, value: i32) -> Result<i32> {
    match positive(field, value, 1 << 12)? {
        v if v % 2 != 0 => Err(Error::Config(format!(
            "{field} {v} is odd; rotary embeddings need an even size"
        ))),
        v => Ok(v),
    }
}

/// `value` if it is finite and above zero, else an error naming the field.
pub fn positive_f32(field: &str, value: f32) -> Result<f32> {
    match value.is_finite() && value > 0.0 {
        true => Ok(value),
        false => Err(Error::Config(format!(
            "{field} is {value}; it must be a finite number above 0"
        ))),
    }
}

impl BaseArgs {
    /// `hidden_size / num_attention_heads`, for families without an explicit head_dim.
    pub fn default_head_dim(&self) -> Result<i32> {
        let heads = positive("num_attention_heads", self.num_attention_heads, MAX_HEADS)?;
        let hidden = positive("hidden_size", self.hidden_size, MAX_HIDDEN)?;
        if hidden % heads != 0 {
            return Err(Error::Config(format!(
                "hidden_size {hidden} is not a multiple of num_attention_heads {heads} (and \
                 there is no head_dim)"
            )));
        }
        Ok(hidden / heads)
    }

    /// `explicit` (config.json's `head_dim`), or `hidden_size / num_attention_heads`.
    pub fn head_dim(&self, explicit: Option<i32>) -> Result<i32> {
        match explicit {
            Some(d) => Ok(d),
            None => self.default_head_dim(),
        }
    }

    /// Checks every size before any arithmetic uses it: a zero, negative, huge or
    /// inconsistent value is an error naming the field, never a panic or an overflow.
    fn validate(&self, t: &FamilyTraits) -> Result<()> {
        positive("hidden_size", self.hidden_size, MAX_HIDDEN)?;
        positive("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS)?;
        positive(
            "intermediate_size",
            self.intermediate_size,
            MAX_INTERMEDIATE,
        )?;
        positive("vocab_size", self.vocab_size, MAX_VOCAB)?;
        positive("head_dim", t.head_dim, MAX_HEAD_DIM)?;
        let heads = positive("num_attention_heads", self.num_attention_heads, MAX_HEADS)?;
        let kv_heads = self.num_key_value_heads.unwrap_or(heads);
        positive("num_key_value_heads", kv_heads, heads)?;
        if heads % kv_heads != 0 {
            return Err(Error::Config(format!(
                "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
            )));
        }
        if t.head_dim % 2 != 0 {
            return Err(Error::Config(format!(
                "head_dim {} is odd; rotary embeddings need an even head_dim",
                t.head_dim
            )));
        }
        positive(
            "num_attention_heads * head_dim",
            heads * t.head_dim,
            MAX_HIDDEN * 4,
        )?;
        positive_f32("rms_norm_eps", self.rms_norm_eps)?;
        positive_f32("rope_theta", t.rope_theta)?;
        Ok(())
    }

    /// The decoder config of a family whose layers all take `t.shape`'s first layer's
    /// attention sizes and biases (llama, qwen, gemma): global layers its rope, sliding ones
    /// theirs where they have their own base.
    pub fn decoder(&self, t: FamilyTraits, rope_scaling: Option<&Value>) -> Result<DecoderConfig> {
        self.validate(&t)?;
        let layer = t.shape.first()?;
        let global = (t.shape.layers.iter())
            .find(|l| l.window().is_none())
            .unwrap_or(&layer);
        let window_rope = (t.shape.layers.iter())
            .find_map(|l| match l.span {
                AttentionSpan::Sliding {
                    rope_base: Some(base),
                    ..
                } => Some(Rope::new(l.rope.dims(t.head_dim), base, &l.rope, None)),
                _ => None,
            })
            .transpose()?;
        Ok(DecoderConfig {
            vocab_size: self.vocab_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            attention: AttentionConfig {
                hidden_size: self.hidden_size,
                heads: self.num_attention_heads,
                kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
                head_dim: t.head_dim,
                bias: layer.bias,
                qk_norm: layer.qk_norm,
                qk_norm_span: layer.qk_norm_span,
                rms_norm_eps: self.rms_norm_eps,
                scale: softmax_scale(layer.scale, t.head_dim)?,
            },
            rope: Rope::new(
                global.rope.dims(t.head_dim),
                t.rope_theta,
                &global.rope,
                rope_scaling,
            )?,
            window_rope,
            shape: t.shape,
        })
    }
}

/// The softmax scale `scale` names for heads of `head_dim`, in f32 as mlx-lm passes it.
fn softmax_scale(scale: AttnScale, head_dim: i32) -> Result<f32> {
    match scale {
        AttnScale::InvSqrtHeadDim => Ok((head_dim as f32).powf(-0.5)),
        AttnScale::QueryPreAttnScalar(s) => {
            let s = positive_f32("query_pre_attn_scalar", s)?;
            Ok(f64::from(s).powf(-0.5) as f32)
        }
        AttnScale::YarnMscale => Err(Error::Config(
            "a YaRN-corrected scale is latent attention's (DeepSeek)".into(),
        )),
    }
}

pub fn yes() -> bool {
    true
}
