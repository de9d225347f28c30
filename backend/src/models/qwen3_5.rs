//! Qwen3.5 and Qwen3.5-MoE: Qwen3-Next's hybrid layers (`qwen3_next.rs`) with the linear
//! attention's projections apart, experts in every layer of a mixture, the rope from
//! `rope_parameters`, and mlx-lm's defaults for every size. Their config comes flat or under
//! `text_config` (the multimodal checkpoints), their weights under `language_model.` or not.

use serde_json::{json, Map, Value};

use super::common::{DeltaProjections, ModelShape, RankPart};
use super::qwen3_next::{self, Args, SparseLayers};
use super::{args, Transformer};
use crate::error::Result;
use crate::weights::Weights;

/// The text config with mlx-lm's `TextModelArgs` defaults filled in, and `rope_theta`,
/// `partial_rotary_factor` and the rope's scaling taken from `rope_parameters` as its
/// `__post_init__` takes them.
fn text_args(config: &Value) -> Result<Args> {
    let mut c: Map<String, Value> = config.as_object().cloned().unwrap_or_default();
    let defaults = json!({
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "rms_norm_eps": 1e-6, "vocab_size": 151936,
        "num_key_value_heads": 8, "linear_num_value_heads": 64, "linear_num_key_heads": 16,
        "linear_key_head_dim": 192, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": false, "attention_bias": false, "full_attention_interval": 4,
        "num_experts": 0, "num_experts_per_tok": 0, "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 0, "moe_intermediate_size": 0,
        "norm_topk_prob": true, "partial_rotary_factor": 0.25, "rope_theta": 100000.0,
        "rope_parameters": {"type": "default", "mrope_section": [11, 11, 10],
                            "rope_theta": 100000, "partial_rotary_factor": 0.25},
    });
    for (key, value) in defaults.as_object().into_iter().flatten() {
        if c.get(key).is_none_or(Value::is_null)
            && !(key == "rope_parameters" && c.contains_key(key))
        {
            c.insert(key.clone(), value.clone());
        }
    }
    if c.get("head_dim").is_none_or(Value::is_null) {
        let (hidden, heads) = (c["hidden_size"].as_i64(), c["num_attention_heads"].as_i64());
        if let (Some(h), Some(n)) = (hidden, heads.filter(|n| *n > 0)) {
            c.insert("head_dim".into(), json!(h / n));
        }
    }
    let rope = c
        .get("rope_parameters")
        .cloned()
        .filter(|r| r.as_object().is_some_and(|o| !o.is_empty()));
    if let Some(rope) = rope {
        let factor = rope
            .get("partial_rotary_factor")
            .cloned()
            .unwrap_or(json!(0.25));
        let theta = rope.get("rope_theta").cloned().unwrap_or(json!(100000.0));
        c.insert("partial_rotary_factor".into(), factor);
        c.insert("rope_theta".into(), theta);
        c.insert("rope_scaling".into(), rope);
    }
    args(&Value::Object(c))
}

/// The shape `config` (the text config) declares.
pub fn shape(config: &Value) -> Result<ModelShape> {
    text_args(config)?.declare(SparseLayers::All)
}

pub fn build(config: &Value, w: &mut Weights, part: &RankPart) -> Result<Box<dyn Transformer>> {
    let a = text_args(config)?;
    let shape = a.declare(SparseLayers::All)?;
    qwen3_next::build_hybrid(&a, shape, (w, part), DeltaProjections::Separate)
}

/// mlx-lm's `sanitize`: `mtp.` and the vision tower (`model.visual`, `vision_tower`) dropped;
/// a Hugging Face checkpoint (its convolutions laid out
/// `[channels, 1, kernel]`) converted, norms stored as `1 + w`.
pub fn sanitize(_: &Value, w: &mut Weights) -> Result<()> {
    let keys: Vec<String> = w.keys().cloned().collect();
    let unsanitized = keys.iter().any(|k| qwen3_next::unsanitized_conv(w, k));
    w.drop_keys(|k| {
        k.contains("mtp.") || k.starts_with("model.visual") || k.starts_with("vision_tower")
    });
    qwen3_next::convert_convs_and_norms(w, unsanitized)
}

/// Qwen3.5-MoE's `sanitize`: each layer's fused `experts.gate_up_proj` split into the gate and
/// up halves, `experts.down_proj` renamed, then Qwen3.5's.
pub fn sanitize_moe(config: &Value, w: &mut Weights) -> Result<()> {
    let layers = config["num_hidden_layers"].as_u64().unwrap_or(0);
    for l in 0..layers {
        let mlp = format!("model.layers.{l}.mlp");
        let gate_up = format!("{mlp}.experts.gate_up_proj");
        if !w.contains(&gate_up) {
            continue;
        }
        let fused = w.take_unchecked(&gate_up)?;
        let halves = fused.split_equal(2, -2)?;
        let [gate, up]: [mlx_rs::Array; 2] = halves.try_into().map_err(|_| {
            crate::error::Error::Weights(format!("`{gate_up}` does not split in two"))
        })?;
        w.insert(&format!("{mlp}.switch_mlp.gate_proj.weight"), gate);
        w.insert(&format!("{mlp}.switch_mlp.up_proj.weight"), up);
        let down = w.take_unchecked(&format!("{mlp}.experts.down_proj"))?;
        w.insert(&format!("{mlp}.switch_mlp.down_proj.weight"), down);
    }
    sanitize(config, w)
}
