//! Model families, one small file each, picked by `model_type` from config.json.

pub mod common;
mod deepseek;
mod llama;
mod qwen2;
mod qwen3;
mod qwen3_moe;

use mlx_rs::Array;
use serde_json::Value;

use crate::cache::KvCache;
use crate::distributed::protocol::CacheOp;
use crate::error::{Error, Result};
use crate::weights::Weights;
use common::{keys, Decoder, ShardPlan, WeightStats};

/// One sequence of a batch: the slot every rank keeps its caches under, and its caches (one
/// per layer).
pub struct Row<'a> {
    pub slot: u64,
    pub caches: &'a mut [KvCache],
}

impl Row<'_> {
    /// The caches of each row, as the decoder takes them.
    pub fn caches<'b>(rows: &'b mut [Row<'_>]) -> Vec<&'b mut [KvCache]> {
        rows.iter_mut().map(|r| &mut *r.caches).collect()
    }
}

/// What the engine needs from a loaded model.
pub trait LanguageModel {
    /// Token ids [B, L] to logits [B, L, vocab]; row b extends `rows[b]`'s caches. A batch of
    /// several rows decodes one token each (L = 1).
    fn forward_rows(&self, inputs: &Array, rows: &mut [Row]) -> Result<Array>;
    fn num_layers(&self) -> usize;
    /// One sequence (slot 0): ids [1, L] to logits [1, L, vocab].
    fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array> {
        self.forward_rows(inputs, &mut [Row { slot: 0, caches }])
    }
    /// Runs prompt ids through, evaluating only what later steps need (the caches).
    fn prefill(&self, inputs: &Array, row: &mut Row) -> Result<()> {
        let caches = &mut *row.caches;
        self.forward_rows(
            inputs,
            &mut [Row {
                slot: row.slot,
                caches,
            }],
        )?;
        Ok(mlx_rs::transforms::eval(
            row.caches.iter().flat_map(KvCache::state),
        )?)
    }
    /// A change rank 0 made to its caches (a slot saved, restored or released, an entry
    /// evicted): other ranks apply the same before the next step. One node has nothing to do.
    fn cache_op(&self, _op: CacheOp) {}
    /// Bytes of keys and values one position of one sequence takes on this rank.
    fn kv_bytes_per_position(&self) -> usize;
    /// The parameters this rank holds: what Status reports.
    fn weight_stats(&self) -> WeightStats;
    /// Whether `forward` may take ids that are not computed yet (device-side greedy decode
    /// one step ahead); false when the ids must be read on the host first.
    fn lazy_inputs(&self) -> bool {
        true
    }
    /// Starts computing `ahead`, a step queued one ahead of the one the host reads next. A
    /// pipeline starts nothing: its next step evaluates it once the last rank has sent.
    fn queue(&self, ahead: &Array) -> Result<()> {
        Ok(mlx_rs::transforms::async_eval([ahead])?)
    }
    /// Call before evaluating the output of `forward` on the host: a pipeline waits until its
    /// last rank has computed it (a posted ring receive would busy-poll a core meanwhile).
    fn await_output(&self) -> Result<()> {
        Ok(())
    }
}

impl LanguageModel for Decoder {
    fn forward_rows(&self, inputs: &Array, rows: &mut [Row]) -> Result<Array> {
        Decoder::forward(self, inputs, &mut Row::caches(rows))
    }
    fn num_layers(&self) -> usize {
        self.layers.len()
    }
    fn kv_bytes_per_position(&self) -> usize {
        Decoder::kv_bytes_per_position(self)
    }
    fn weight_stats(&self) -> WeightStats {
        Decoder::weight_stats(self)
    }
}

type Builder = fn(&Value, &mut Weights, &ShardPlan) -> Result<Decoder>;

/// The registry: `model_type` to the family's builder.
const FAMILIES: &[(&str, Builder)] = &[
    ("llama", llama::build),
    ("mistral", llama::build),
    ("qwen2", qwen2::build),
    ("qwen3", qwen3::build),
    ("qwen3_moe", qwen3_moe::build),
    ("deepseek_v2", deepseek::build_v2),
    ("deepseek_v3", deepseek::build_v3),
    // Kimi K2 is DeepSeek-V3's architecture under its own name.
    ("kimi_k2", deepseek::build_v3),
];

/// Builds this rank's part (`plan`) of the model that `config` describes, strictly: every
/// checkpoint key must be used, except rotary caches, a tied `lm_head` and other ranks' parts.
pub fn build(config: &Value, mut weights: Weights, plan: &ShardPlan) -> Result<Decoder> {
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
    let model = builder(config, &mut weights, plan)?;
    let tied = config["tie_word_embeddings"].as_bool().unwrap_or(true);
    weights.finish(|key| {
        key.contains("rotary_emb.inv_freq")
            || (tied && key.starts_with(&format!("{}.", keys::HEAD)))
            || not_in_plan(key, plan)
    })?;
    // Layer by layer: the weights are read (and dequantized) here, which is what takes time.
    let mut progress = crate::progress::Progress::new("loading layers", model.layers.len());
    for layer in &model.layers {
        mlx_rs::transforms::eval(layer.arrays())?;
        progress.tick();
    }
    mlx_rs::transforms::eval(model.arrays())?;
    Ok(model)
}

/// A key another rank holds (its layers, or the embedding, norm and head).
fn not_in_plan(key: &str, plan: &ShardPlan) -> bool {
    match keys::layer_of(key) {
        Some(i) => !plan.holds_layer(i),
        None => !plan.ends && keys::is_end(key),
    }
}

/// Parses the family's argument struct from config.json, naming the field on error.
fn args<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T> {
    T::deserialize(config).map_err(|e| Error::Config(e.to_string()))
}
