//! Gemma 3 (`gemma3_text`, and `gemma3`'s text model): sliding-window layers between global
//! ones, each kind with its own rope base; `1 + w` RMS norms around both blocks and on q/k;
//! GeGLU-tanh; `query_pre_attn_scalar`; the embedding scaled by √hidden.

use serde::Deserialize;
use serde_json::{json, Value};

use super::common::shape::{
    Activation, AttentionSpan, AttnScale, EmbedScale, NormKind, NormPlacement, NormShape,
    RopeScaling, SandwichKeys,
};
use super::common::{BaseArgs, Decoder, EndShape, FamilyTraits, HeadKind, LayerShape};
use super::common::{ModelShape, RankPart};
use super::{args, Transformer};
use crate::error::Result;
use crate::weights::Weights;

/// mlx-lm's `gemma3_text.ModelArgs`, with its defaults.
#[derive(Deserialize)]
#[serde(default)]
struct Args {
    hidden_size: i32,
    num_hidden_layers: i32,
    intermediate_size: i32,
    num_attention_heads: i32,
    head_dim: i32,
    rms_norm_eps: f32,
    vocab_size: i32,
    num_key_value_heads: i32,
    rope_theta: f32,
    rope_local_base_freq: f32,
    query_pre_attn_scalar: f32,
    sliding_window: i32,
    sliding_window_pattern: i32,
    rope_scaling: Option<Value>,
    tie_word_embeddings: bool,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            hidden_size: 1152,
            num_hidden_layers: 26,
            intermediate_size: 6912,
            num_attention_heads: 4,
            head_dim: 256,
            rms_norm_eps: 1e-6,
            vocab_size: 262144,
            num_key_value_heads: 1,
            rope_theta: 1_000_000.0,
            rope_local_base_freq: 10_000.0,
            query_pre_attn_scalar: 256.0,
            sliding_window: 512,
            sliding_window_pattern: 6,
            rope_scaling: None,
            tie_word_embeddings: true,
        }
    }
}

impl Args {
    fn base(&self) -> BaseArgs {
        BaseArgs {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            intermediate_size: self.intermediate_size,
            num_attention_heads: self.num_attention_heads,
            rms_norm_eps: self.rms_norm_eps,
            vocab_size: self.vocab_size,
            num_key_value_heads: Some(self.num_key_value_heads),
            rope_scaling: self.rope_scaling.clone(),
        }
    }
}

/// Every `sliding_window_pattern`-th layer global (with `rope_scaling`), the rest sliding
/// over `sliding_window` from their own base; `1 + w` norms sandwiching both blocks.
fn declare(a: &Args) -> Result<ModelShape> {
    let pattern =
        super::common::positive("sliding_window_pattern", a.sliding_window_pattern, i32::MAX)?;
    let mut global = LayerShape::llama(RopeScaling::of(a.rope_scaling.as_ref())?);
    global.norms = NormShape {
        kind: NormKind::RmsPlusOne,
        placement: NormPlacement::Sandwich(SandwichKeys::Gemma),
    };
    global.activation = Activation::GeGluTanh;
    global.scale = AttnScale::QueryPreAttnScalar(a.query_pre_attn_scalar);
    global.qk_norm = Some(NormKind::RmsPlusOne);
    let mut sliding = global;
    sliding.rope.scaling = RopeScaling::None;
    sliding.span = AttentionSpan::Sliding {
        window: a.sliding_window,
        rope_base: Some(a.rope_local_base_freq),
    };
    let ends = EndShape {
        embed_scale: EmbedScale::SqrtHidden,
        final_norm: NormKind::RmsPlusOne,
        head: HeadKind::tied(a.tie_word_embeddings),
        ..EndShape::plain(HeadKind::Tied)
    };
    ModelShape::new(a.num_hidden_layers, ends, |i| {
        match (i as i64 + 1) % i64::from(pattern) {
            0 => global,
            _ => sliding,
        }
    })
}

/// The shape `config` declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    declare(&args(config)?)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a: Args = args(config)?;
    let traits = FamilyTraits {
        head_dim: a.head_dim,
        rope_theta: a.rope_theta,
        shape: declare(&a)?,
    };
    super::common::positive_f32("rope_local_base_freq", a.rope_local_base_freq)?;
    let c = a.base().decoder(traits, a.rope_scaling.as_ref())?;
    Ok(Box::new(Decoder::load(w, c, part)?))
}

/// `gemma3`'s text config as mlx-lm completes it: the wrapper's `vocab_size` (262,208 when
/// absent) and 8 attention heads over 4 KV heads unless the text config says.
pub fn complete(config: &Value, text: &mut Value) {
    text["vocab_size"] = config.get("vocab_size").cloned().unwrap_or(json!(262208));
    for (key, default) in [("num_attention_heads", 8), ("num_key_value_heads", 4)] {
        if text.get(key).is_none() {
            text[key] = json!(default);
        }
    }
}
