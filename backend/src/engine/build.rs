//! A model built beside the one being served: its draft, its parts (alone or over the
//! cluster), its context and KV budget, checked before anything is unloaded.

use std::time::Duration;

use super::cluster_load;
use super::core::EngineThread;
use super::load::Ready;
use super::p2p_load;
use crate::cache::KvFormat;
use crate::error::{Error, Result};
use crate::grammar::Grammars;
use crate::loader::{self, LoadedModel};
use crate::options::LoadConfig;
use crate::source;
use crate::speculative::DraftModel;
use crate::tokenizer::Tokenizer;

impl EngineThread {
    /// Loads `config`'s model, leaving the one being served in place (unless the load needs
    /// another cluster: its wait phase left the old one, see `leave_cluster`).
    pub(super) fn build(
        &mut self,
        config: &LoadConfig,
        ready: Ready,
        give_up: crate::distributed::GiveUp<'_>,
    ) -> Result<Built> {
        let draft = load_draft(config)?;
        let (hostfile, joined) = match ready {
            Ready::Now => {
                let h = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1);
                (h, None)
            }
            Ready::Cluster { hostfile, joined } => (Some(hostfile), joined),
        };
        let model = match &hostfile {
            Some(h) => {
                if joined.is_some() && self.serving.on_cluster() {
                    self.leave_cluster();
                }
                cluster_load::load(config, h, &mut self.formed, joined, give_up)?
            }
            None => {
                let lookup = source::Lookup::of(config);
                let dir = source::resolve_with(&config.model, &lookup)?;
                let adapters = source::resolve_adapters(&config.adapters, &lookup)?;
                self.check_room(&dir, config)?;
                let recipe = loader::Recipe {
                    mode: config.weight_mode,
                    adapters: &adapters,
                };
                loader::load_adapted(&dir, recipe, config.kv)?
            }
        };
        check_speculation(config, &model.config)?;
        let text = crate::models::text_config_of(&model.config)?;
        let model_context = text["max_position_embeddings"].as_u64().map(|n| n as usize);
        let context = [
            config.limits.context_size,
            config.limits.max_kv_size,
            model_context,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(4096);
        Ok(Built {
            model,
            config: config.clone(),
            context,
            on_cluster: hostfile.is_some(),
            draft,
        })
    }

    /// Refuses a load that cannot fit beside the model being served, which stays resident
    /// until the new one is complete.
    pub(super) fn check_room(&self, dir: &std::path::Path, config: &LoadConfig) -> Result<()> {
        let Some(old) = self.serving.loaded() else {
            return Ok(());
        };
        let need = loader::resident_estimate(dir, config.weight_mode)?;
        let free = crate::distributed::free_memory();
        if free == 0 || need <= free {
            return Ok(());
        }
        Err(Error::Overloaded(format!(
            "`{}` needs about {} MiB beside the loaded `{}`, and {} MiB is free: LoadModel keeps \
             the loaded model until the new one is complete; call Free first, then LoadModel",
            crate::error::quote(&config.model),
            need >> 20,
            crate::error::quote(&old.config.model),
            free >> 20
        )))
    }
}

/// The time options within the bounds their waits enforce, checked before anything is
/// unloaded, so a LoadModel with a bad one changes nothing.
pub(super) fn check_waits(config: &LoadConfig) -> Result<()> {
    crate::distributed::check_join_timeout(Duration::from_secs(config.cluster.join_timeout_secs))?;
    if let Some(p2p) = &config.p2p {
        p2p_load::check_wait(p2p)?;
    }
    super::batch::check_queue_timeout(config.limits.queue_timeout_secs)
}

/// A model loaded beside the one being served, not yet installed.
pub(super) struct Built {
    pub(super) model: LoadedModel,
    pub(super) config: LoadConfig,
    pub(super) context: usize,
    /// Whether it was loaded over the engine's cluster.
    pub(super) on_cluster: bool,
    pub(super) draft: Option<DraftModel>,
}

/// Refuses speculative decoding on a model with linear-attention layers: a step's rejected
/// proposals are taken back by cutting the caches, and a recurrent state cannot be cut back
/// to a position between its checkpoints.
fn check_speculation(config: &LoadConfig, model: &serde_json::Value) -> Result<()> {
    let drafting = config.spec.drafting != crate::speculative::Drafting::Off;
    if !drafting && config.spec.draft_model.is_none() {
        return Ok(());
    }
    match has_linear_attention(model)? {
        true => Err(crate::error::Error::InvalidRequest(
            "speculative decoding is not supported on a model with linear-attention layers \
             (qwen3_next, qwen3_5, qwen3_5_moe): their recurrent state cannot be taken back \
             by a rejected proposal; leave speculative and DraftModel unset"
                .into(),
        )),
        false => Ok(()),
    }
}

/// Whether the model config.json describes has linear-attention layers (recurrent states).
fn has_linear_attention(model: &serde_json::Value) -> Result<bool> {
    let shape = crate::models::facts_of(model)?.shape(model)?;
    let linear = crate::models::common::shape::AttentionKind::GatedDelta;
    Ok(shape.layers.iter().any(|l| l.attention == linear))
}

/// `config`'s draft model, on this rank only, before the model itself (so a draft that
/// cannot serve costs nothing): refused unless it tokenizes as the model does.
pub(super) fn load_draft(config: &LoadConfig) -> Result<Option<DraftModel>> {
    let Some(name) = &config.spec.draft_model else {
        return Ok(None);
    };
    let lookup = source::Lookup::of(config);
    let target = Tokenizer::load(&source::resolve_with(&config.model, &lookup)?)?;
    let refuse = |why: String| {
        Error::Config(format!(
            "DraftModel `{}` cannot draft for `{}`: {why}",
            crate::error::quote(name),
            crate::error::quote(&config.model)
        ))
    };
    let dir = source::resolve_with(name, &lookup).map_err(|e| refuse(e.to_string()))?;
    target
        .same_as(&Tokenizer::load(&dir).map_err(|e| refuse(e.to_string()))?)
        .map_err(|why| refuse(format!("its tokenizer differs ({why})")))?;
    let loaded = loader::load_with_kv(&dir, config.weight_mode, KvFormat::default())?;
    if has_linear_attention(&loaded.config)? {
        return Err(refuse(
            "it has linear-attention layers, whose state cannot take back rejected proposals"
                .into(),
        ));
    }
    let vocab = target.vocab_size();
    Ok(Some(DraftModel::new(
        loaded.model,
        config.limits.prefill_step,
        vocab,
    )))
}

/// The grammar compiler for `built`'s tokenizer, over its logits' width.
pub(super) fn grammars_for(built: &Built) -> Grammars {
    let tok = &built.model.tokenizer;
    let text = crate::models::text_config_of(&built.model.config).unwrap_or_default();
    let vocab = text["vocab_size"]
        .as_u64()
        .map_or(tok.vocab_size(), |v| v as usize);
    let eos: Vec<u32> = tok.eos_ids().iter().copied().collect();
    let triggers = &built.config.grammar_triggers;
    Grammars::new(&built.model.dir, vocab, &eos, triggers)
}

/// Bytes of KV memory for `config`: its `kv_memory_mb`, or half of what is free once the
/// weights are in (the rest is for MLX's own buffers).
pub(super) fn kv_budget(config: &LoadConfig) -> usize {
    let budget = match config.limits.kv_memory_mb {
        Some(mb) => mb << 20,
        None => match crate::distributed::free_memory() {
            0 => usize::MAX,
            free => (free / 2) as usize,
        },
    };
    tracing::info!(kv_budget_mb = budget >> 20, "KV memory budget");
    budget
}
