//! Model families, one small file each, picked by `model_type` from config.json.

pub mod common;
mod deepseek;
mod ernie4_5;
mod gemma3;
mod glm4;
mod glm4_moe;
mod gpt_oss;
mod llama;
mod minimax;
mod ministral3;
mod mistral3;
mod mistral4;
mod qwen2;
mod qwen3;
mod qwen3_moe;

use mlx_rs::Array;
use serde_json::Value;

use crate::cache::{KvCache, KvFormat};
use crate::distributed::protocol::CacheOp;
use crate::error::{Error, Result};
use crate::weights::Weights;
use common::{keys, HeadKind, ModelShape, RankPart, WeightStats};

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
///
/// Each step takes the changes the scheduler made to its caches since the step before (a
/// slot saved, restored or released, an entry evicted: `cache_ops`), which the other ranks
/// of a cluster apply before it; one node has nothing to do with them.
pub trait LanguageModel {
    /// Token ids [B, L] to logits [B, L, vocab]; row b extends `rows[b]`'s caches. A batch of
    /// several rows decodes one token each (L = 1).
    fn forward_rows(
        &self,
        inputs: &Array,
        rows: &mut [Row],
        cache_ops: Vec<CacheOp>,
    ) -> Result<Array>;
    fn num_layers(&self) -> usize;
    /// One sequence (slot 0): ids [1, L] to logits [1, L, vocab].
    fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array> {
        self.forward_rows(inputs, &mut [Row { slot: 0, caches }], Vec::new())
    }
    /// Runs prompt ids through, evaluating only what later steps need (the caches).
    fn prefill(&self, inputs: &Array, row: &mut Row, cache_ops: Vec<CacheOp>) -> Result<()> {
        let caches = &mut *row.caches;
        let slot = row.slot;
        self.forward_rows(inputs, &mut [Row { slot, caches }], cache_ops)?;
        Ok(mlx_rs::transforms::eval(
            row.caches.iter().flat_map(KvCache::state),
        )?)
    }
    /// Bytes of keys and values one position of one sequence takes on this rank.
    fn kv_bytes_per_position(&self) -> usize;
    /// Bytes of keys and values a sequence of `positions` takes on this rank, its prompt
    /// prefilled `chunk` at a time (a sliding layer holds its window, not every position).
    fn kv_bytes(&self, positions: usize, _chunk: usize) -> usize {
        positions * self.kv_bytes_per_position()
    }
    /// Each layer's window on this rank, for a sliding layer.
    fn layer_windows(&self) -> Vec<Option<i32>> {
        vec![None; self.num_layers()]
    }
    /// The windows of the whole model's sliding layers: what a stored prefix must keep.
    fn model_windows(&self) -> Vec<i32> {
        Vec::new()
    }
    /// How this model's KV caches store positions (the cache types LoadModel chose).
    fn kv_format(&self) -> KvFormat {
        KvFormat::default()
    }
    /// One sequence's caches, one per layer this rank holds, in the model's format.
    fn new_caches(&self) -> Vec<KvCache> {
        KvCache::for_layers(self.kv_format(), &self.layer_windows())
    }
    /// The parameters this rank holds: what Status reports.
    fn weight_stats(&self) -> WeightStats;
    /// How this model takes a greedy step queued one ahead of the token the host reads next.
    fn queueing(&self) -> Queueing {
        Queueing::Async
    }
    /// Call before evaluating the output of `forward` on the host: a pipeline waits until its
    /// last rank has computed it (a posted ring receive would busy-poll a core meanwhile).
    fn await_output(&self) -> Result<()> {
        Ok(())
    }
}

/// How a model takes a step queued one ahead (its ids still being computed), so the device
/// never waits for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queueing {
    /// Queued with `async_eval`.
    Async,
    /// Left to the next step, which evaluates it (a pipeline: once the last rank has sent).
    NextStep,
    /// Not at all: the ids must be on the host first (tensor and expert modes send them).
    HostIds,
}

impl Queueing {
    /// Starts `ahead`, a step just queued, the way this mode takes it.
    pub fn start(self, ahead: &Array) -> Result<()> {
        match self {
            Queueing::Async => Ok(mlx_rs::transforms::async_eval([ahead])?),
            Queueing::NextStep | Queueing::HostIds => Ok(()),
        }
    }
}

/// A rank's part of a model (all of it on one node), whatever blocks its family uses:
/// what a family builds and the engine drives (one node, rank 0's sharded model, a worker).
pub trait Transformer {
    /// Token ids [B, L] to the first layer's input (where this rank holds the embedding).
    fn embed(&self, inputs: &Array) -> Result<Array>;
    /// This rank's layers over `h` ([B, L, hidden]); row b extends `rows[b]` (a cache a layer).
    fn run_layers(&self, h: &Array, rows: &mut [&mut [KvCache]]) -> Result<Array>;
    /// The last layer's output to logits (where this rank holds the final norm and head).
    fn head(&self, h: &Array) -> Result<Array>;
    /// This rank's layers.
    fn num_layers(&self) -> usize;
    /// Bytes of keys and values one position of one sequence takes in this rank's layers,
    /// stored in `format`.
    fn kv_bytes_per_position(&self, format: &KvFormat) -> usize;
    /// Bytes of keys and values `positions` of one sequence take in this rank's layers,
    /// prefilled `chunk` at a time.
    fn kv_bytes(&self, format: &KvFormat, positions: usize, _chunk: usize) -> usize {
        positions * self.kv_bytes_per_position(format)
    }
    /// Each of this rank's layers' window, for a sliding layer.
    fn layer_windows(&self) -> Vec<Option<i32>> {
        vec![None; self.num_layers()]
    }
    /// The windows of the whole model's sliding layers.
    fn model_windows(&self) -> Vec<i32> {
        Vec::new()
    }
    /// Refuses a cache format this rank's attention cannot read (naming why).
    fn check_kv_format(&self, _format: &KvFormat) -> Result<()> {
        Ok(())
    }
    /// What this rank's parameters take.
    fn weight_stats(&self) -> WeightStats;
    /// Reads every weight now, so LoadModel pays for it and not the first request.
    fn materialize(&self) -> Result<()>;
    /// Token ids [B, L] to logits [B, L, vocab], through every part.
    fn forward(&self, inputs: &Array, rows: &mut [&mut [KvCache]]) -> Result<Array> {
        let h = self.embed(inputs)?;
        let h = self.run_layers(&h, rows)?;
        self.head(&h)
    }
}

/// A model held whole by this machine.
pub struct LocalModel {
    transformer: Box<dyn Transformer>,
    kv: KvFormat,
}

impl LocalModel {
    /// Serves `transformer` with caches stored in `kv` (refused where it cannot read them).
    pub fn new(transformer: Box<dyn Transformer>, kv: KvFormat) -> Result<LocalModel> {
        transformer.check_kv_format(&kv)?;
        Ok(LocalModel { transformer, kv })
    }
}

impl LanguageModel for LocalModel {
    fn forward_rows(&self, inputs: &Array, rows: &mut [Row], _: Vec<CacheOp>) -> Result<Array> {
        self.transformer.forward(inputs, &mut Row::caches(rows))
    }
    fn num_layers(&self) -> usize {
        self.transformer.num_layers()
    }
    fn kv_bytes_per_position(&self) -> usize {
        self.transformer.kv_bytes_per_position(&self.kv)
    }
    fn kv_bytes(&self, positions: usize, chunk: usize) -> usize {
        self.transformer.kv_bytes(&self.kv, positions, chunk)
    }
    fn layer_windows(&self) -> Vec<Option<i32>> {
        self.transformer.layer_windows()
    }
    fn model_windows(&self) -> Vec<i32> {
        self.transformer.model_windows()
    }
    fn kv_format(&self) -> KvFormat {
        self.kv
    }
    fn weight_stats(&self) -> WeightStats {
        self.transformer.weight_stats()
    }
}

type Builder = fn(&Value, &mut Weights, &RankPart) -> Result<Box<dyn Transformer>>;

/// A family's declared shape for a config.json (what its builder builds).
type Declare = fn(&Value) -> Result<ModelShape>;

/// A family's own checkpoint key mapping, applied before its builder takes keys (mlx-lm's
/// `sanitize`): per-expert tensors stacked, extra modules dropped.
type Sanitize = fn(&Value, &mut Weights) -> Result<()>;

/// Fills in what a wrapper's `text_config` leaves to the wrapper (mlx-lm's `__post_init__`):
/// called with the whole config.json and the text config to complete.
type Complete = fn(&Value, &mut Value);

/// Where a family's text model config sits in config.json.
#[derive(Debug, Clone, Copy)]
pub enum TextConfigAt {
    TopLevel,
    /// Under `text_config` (multimodal checkpoints), completed by the wrapper's defaults.
    Nested(Complete),
}

/// Where a checkpoint keeps its layers, embedding, final norm and head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `model.layers.N`, `model.embed_tokens`, `model.norm`, `lm_head`.
    Model,
    /// The same under `language_model.` (multimodal checkpoints).
    LanguageModel,
}

/// What a multimodal checkpoint keeps beside its text model, dropped as mlx-lm drops it: the
/// model is served as text only.
const TOWERS: [&str; 5] = [
    "vision_tower",
    "vision_model",
    "multi_modal_projector",
    "mm_projector",
    "audio_tower",
];

impl Layout {
    /// The layer a key belongs to, if it is a layer's.
    pub fn layer_of(self, key: &str) -> Option<usize> {
        keys::layer_of(&self.text_key(key)?)
    }

    /// Whether a key is the embedding's, the final norm's or the head's.
    pub fn is_end(self, key: &str) -> bool {
        self.text_key(key).is_some_and(|k| keys::is_end(&k))
    }

    /// The key as the `Model` layout spells it, or `None` for a tower's: a wrapper's text
    /// model out of `language_model.` (or transformers 5's `model.language_model.`).
    pub fn text_key(self, key: &str) -> Option<String> {
        match self {
            Layout::Model => Some(key.to_string()),
            Layout::LanguageModel if TOWERS.iter().any(|t| key.contains(t)) => None,
            Layout::LanguageModel => Some(match key.strip_prefix("model.language_model.") {
                Some(rest) => format!("model.{rest}"),
                None => key
                    .strip_prefix("language_model.")
                    .unwrap_or(key)
                    .to_string(),
            }),
        }
    }

    /// Whether this layout drops towers beside the text model (served as text only).
    pub fn text_only(self) -> bool {
        self == Layout::LanguageModel
    }
}

/// Whether a family routes over experts, and the config field that counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experts {
    Dense,
    /// Routed experts, counted by this config field.
    CountedBy(&'static str),
}

/// What the rest of the backend asks of a family: how to build it and map its keys, its
/// experts, and where its config and layers are.
pub struct FamilyFacts {
    pub model_type: &'static str,
    build: Builder,
    declare: Declare,
    pub sanitize: Sanitize,
    pub experts: Experts,
    pub text_config: TextConfigAt,
    pub layout: Layout,
}

impl FamilyFacts {
    /// A text-only family at the top level of config.json, laid out as `model.layers.N`.
    const fn text(
        model_type: &'static str,
        (build, declare, sanitize): (Builder, Declare, Sanitize),
        experts: Experts,
    ) -> FamilyFacts {
        FamilyFacts {
            model_type,
            build,
            declare,
            sanitize,
            experts,
            text_config: TextConfigAt::TopLevel,
            layout: Layout::Model,
        }
    }

    /// A multimodal wrapper: its text model's config under `text_config` (completed by
    /// `complete`), its weights under `language_model.`, towers beside them dropped.
    const fn wrapper(
        model_type: &'static str,
        (build, declare, sanitize): (Builder, Declare, Sanitize),
        experts: Experts,
        complete: Complete,
    ) -> FamilyFacts {
        FamilyFacts {
            model_type,
            build,
            declare,
            sanitize,
            experts,
            text_config: TextConfigAt::Nested(complete),
            layout: Layout::LanguageModel,
        }
    }

    /// The part of config.json that describes the text model, with the wrapper's defaults.
    pub fn text_config(&self, config: &Value) -> Result<Value> {
        match self.text_config {
            TextConfigAt::TopLevel => Ok(config.clone()),
            TextConfigAt::Nested(complete) => {
                let given = config.get("text_config").filter(|t| !t.is_null());
                let mut text = given.cloned().ok_or_else(|| {
                    Error::Config(format!(
                        "config.json of a {} checkpoint has no text_config",
                        self.model_type
                    ))
                })?;
                if !text.is_object() {
                    return Err(Error::Config(format!(
                        "text_config of a {} checkpoint is not an object",
                        self.model_type
                    )));
                }
                complete(config, &mut text);
                Ok(text)
            }
        }
    }

    /// The model's layer count (`num_hidden_layers` of its text config).
    pub fn num_layers(&self, config: &Value) -> Result<usize> {
        let layers = self.text_config(config)?["num_hidden_layers"].as_u64();
        let layers =
            layers.ok_or_else(|| Error::Config("config.json has no num_hidden_layers".into()))?;
        usize::try_from(layers).map_err(|e| Error::Config(format!("num_hidden_layers: {e}")))
    }

    /// The routed experts a mixture has (`None` for a dense family or a config without them).
    pub fn expert_count(&self, config: &Value) -> Option<u64> {
        match self.experts {
            Experts::Dense => None,
            Experts::CountedBy(key) => self.text_config(config).ok()?[key].as_u64(),
        }
    }

    /// The shape `config` declares.
    pub fn shape(&self, config: &Value) -> Result<ModelShape> {
        (self.declare)(&self.text_config(config)?)
    }
}

const LLAMA: (Builder, Declare, Sanitize) = (llama::build, llama::shape, as_stored);
const DEEPSEEK_V3: (Builder, Declare, Sanitize) = (
    deepseek::build_v3,
    deepseek::shape_v3,
    deepseek::sanitize_v3,
);

/// The registry: `model_type` to the family's facts.
const FAMILIES: &[FamilyFacts] = &[
    FamilyFacts::text("llama", LLAMA, Experts::Dense),
    FamilyFacts::text("mistral", LLAMA, Experts::Dense),
    FamilyFacts::text(
        "qwen2",
        (qwen2::build, qwen2::shape, as_stored),
        Experts::Dense,
    ),
    FamilyFacts::text(
        "qwen3",
        (qwen3::build, qwen3::shape, as_stored),
        Experts::Dense,
    ),
    FamilyFacts::text(
        "qwen3_moe",
        (qwen3_moe::build, qwen3_moe::shape, qwen3_moe::sanitize),
        Experts::CountedBy("num_experts"),
    ),
    FamilyFacts::text(
        "deepseek_v2",
        (
            deepseek::build_v2,
            deepseek::shape_v2,
            deepseek::sanitize_v2,
        ),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text(
        "deepseek_v3",
        DEEPSEEK_V3,
        Experts::CountedBy("n_routed_experts"),
    ),
    // Kimi K2 is DeepSeek-V3's architecture under its own name.
    FamilyFacts::text(
        "kimi_k2",
        DEEPSEEK_V3,
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::wrapper(
        "kimi_k25",
        DEEPSEEK_V3,
        Experts::CountedBy("n_routed_experts"),
        as_given,
    ),
    FamilyFacts::text("gemma3_text", GEMMA3, Experts::Dense),
    FamilyFacts::wrapper("gemma3", GEMMA3, Experts::Dense, gemma3::complete),
    FamilyFacts::text("ministral3", MINISTRAL3, Experts::Dense),
    FamilyFacts::wrapper(
        "mistral3",
        (mistral3::build, mistral3::shape, mistral3::sanitize),
        Experts::CountedBy("n_routed_experts"),
        mistral3::complete,
    ),
    FamilyFacts::text(
        "ernie4_5",
        (ernie4_5::build, ernie4_5::shape, as_stored),
        Experts::Dense,
    ),
    FamilyFacts::text(
        "glm4",
        (glm4::build, glm4::shape, glm4::sanitize),
        Experts::Dense,
    ),
    FamilyFacts::text(
        "glm4_moe_lite",
        (
            deepseek::build_glm_lite,
            deepseek::shape_v3,
            deepseek::sanitize_v3,
        ),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text(
        "glm4_moe",
        (glm4_moe::build, glm4_moe::shape, deepseek::sanitize_v3),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text(
        "deepseek_v32",
        (
            deepseek::build_v32,
            deepseek::shape_v32,
            deepseek::sanitize_v3,
        ),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text(
        "glm_moe_dsa",
        (
            deepseek::build_glm_dsa,
            deepseek::shape_glm_dsa,
            deepseek::sanitize_v3,
        ),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text("minimax", MINIMAX, Experts::CountedBy("num_local_experts")),
    // mlx-lm maps `minimax_m2` (MiniMax M2's own model_type) onto `minimax`.
    FamilyFacts::text(
        "minimax_m2",
        MINIMAX,
        Experts::CountedBy("num_local_experts"),
    ),
    FamilyFacts::text(
        "mistral4",
        (mistral4::build, mistral4::shape, mistral4::sanitize),
        Experts::CountedBy("n_routed_experts"),
    ),
    FamilyFacts::text(
        "gpt_oss",
        (gpt_oss::build, gpt_oss::shape, gpt_oss::sanitize),
        Experts::CountedBy("num_local_experts"),
    ),
];

const GEMMA3: (Builder, Declare, Sanitize) = (gemma3::build, gemma3::shape, as_stored);
const MINISTRAL3: (Builder, Declare, Sanitize) = (ministral3::build, ministral3::shape, as_stored);
const MINIMAX: (Builder, Declare, Sanitize) = (minimax::build, minimax::shape, minimax::sanitize);

/// A wrapper whose text config needs nothing from around it.
fn as_given(_: &Value, _: &mut Value) {}

/// A family whose checkpoints need no key mapping of their own.
fn as_stored(_: &Value, _: &mut Weights) -> Result<()> {
    Ok(())
}

/// Every `model_type` the registry takes, aliases included, in its order.
pub fn model_types() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.model_type).collect()
}

/// The registry's facts for `model_type`.
pub fn facts(model_type: &str) -> Result<&'static FamilyFacts> {
    FAMILIES
        .iter()
        .find(|f| f.model_type == model_type)
        .ok_or_else(|| {
            let names: Vec<&str> = FAMILIES.iter().map(|f| f.model_type).collect();
            Error::UnsupportedModel(model_type.to_string(), names.join(", "))
        })
}

/// The facts of the family config.json names (its `model_type`).
pub fn facts_of(config: &Value) -> Result<&'static FamilyFacts> {
    let model_type = config["model_type"]
        .as_str()
        .ok_or_else(|| Error::Config("config.json has no model_type".into()))?;
    facts(model_type)
}

/// The text model's part of config.json (a wrapper's completed `text_config`, else all of
/// it): where its sizes are read.
pub fn text_config_of(config: &Value) -> Result<Value> {
    facts_of(config)?.text_config(config)
}

/// Builds this rank's `part` of the model that `config` describes, strictly: every
/// checkpoint key must be used, except other ranks' parts and what `sanitize` drops.
pub fn build(
    config: &Value,
    mut weights: Weights,
    part: &RankPart,
) -> Result<Box<dyn Transformer>> {
    let family = facts_of(config)?;
    let text = family.text_config(config)?;
    if family.layout.text_only() {
        weights.rename_keys(|key| family.layout.text_key(key));
        tracing::info!("{}: served as text only", family.model_type);
    }
    sanitize(family.shape(config)?.ends.head, &mut weights);
    (family.sanitize)(&text, &mut weights)?;
    let model = (family.build)(&text, &mut weights, part)?;
    weights.finish(|key| not_in_part(key, part))?;
    model.materialize()?;
    Ok(model)
}

/// What every family drops, as mlx-lm does: rotary caches, and an `lm_head` that a tied
/// embedding replaces (the family declares which its head is).
fn sanitize(head: HeadKind, weights: &mut Weights) {
    let tied = head == HeadKind::Tied;
    let head = format!("{}.", keys::HEAD);
    weights
        .drop_keys(|key| key.contains("rotary_emb.inv_freq") || (tied && key.starts_with(&head)));
}

/// A key another rank holds (its layers, or the embedding, norm and head).
fn not_in_part(key: &str, part: &RankPart) -> bool {
    match keys::layer_of(key) {
        Some(i) => !part.holds_layer(i),
        None => !part.ends && keys::is_end(key),
    }
}

/// Parses the family's argument struct from config.json, naming the field on error.
fn args<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T> {
    T::deserialize(config).map_err(|e| Error::Config(e.to_string()))
}

#[cfg(test)]
mod tests;
