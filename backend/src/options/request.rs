//! What LoadModel was given, and its parsing into a `LoadConfig`: the request's own fields,
//! then each option through the table to its group's setter, then the fallbacks and the
//! checks that span options.

use super::config::LoadConfig;
use super::parse::parse_options;
use super::{validate, Env};
use crate::lora::AdapterSpec;

/// What LoadModel was given, before parsing.
#[derive(Debug, Clone, Default)]
pub struct LoadRequest {
    pub model: String,
    pub model_path: String,
    pub options: Vec<String>,
    pub context_size: i32,
    pub trust_remote_code: bool,
    /// `ModelOptions.GrammarTriggers`' words.
    pub grammar_triggers: Vec<String>,
    /// `ModelOptions.CacheTypeKey`/`CacheTypeValue` (llama.cpp's names: f16, q8_0, q4_0...).
    pub cache_type_key: String,
    pub cache_type_value: String,
    /// `ModelOptions.DraftModel`: a folder or repo id with the same tokenizer.
    pub draft_model: String,
    /// `ModelOptions.LoraAdapter` and `LoraScale` (0: 1.0).
    pub lora_adapter: String,
    pub lora_scale: f32,
    /// `ModelOptions.LoraAdapters` and `LoraScales` (none: 1.0 each).
    pub lora_adapters: Vec<String>,
    pub lora_scales: Vec<f32>,
    /// `ModelOptions.LoraBase` (llama.cpp's float base for a quantized model's adapter).
    pub lora_base: String,
}

/// The request's own fields, before any option.
fn check_request(req: &LoadRequest) -> Result<(), String> {
    if req.model.trim().is_empty() {
        return Err(
            "ModelOptions.Model is empty: name a model folder or a Hugging Face repo id".into(),
        );
    }
    if req.context_size < 0 {
        return Err(format!(
            "ContextSize must not be negative (got {})",
            req.context_size
        ));
    }
    Ok(())
}

/// The adapters a request names: `LoraAdapter` (at `LoraScale`, 0 meaning 1) then each of
/// `LoraAdapters` (at its `LoraScales` entry; none given: 1 each).
fn adapters_of(req: &LoadRequest) -> Result<Vec<AdapterSpec>, String> {
    if !req.lora_base.trim().is_empty() {
        return Err(
            "ModelOptions.LoraBase is not read by this backend: it names llama.cpp's float \
             base model for an adapter, and here every adapter is applied over the loaded \
             model's own weights, whatever their dtype (remove `lora_base`)"
                .into(),
        );
    }
    let (names, scales) = (&req.lora_adapters, &req.lora_scales);
    if !scales.is_empty() && scales.len() != names.len() {
        return Err(format!(
            "ModelOptions.LoraScales has {} values for {} LoraAdapters: give one per adapter, \
             or none for 1.0 each",
            scales.len(),
            names.len()
        ));
    }
    let single = (!req.lora_adapter.trim().is_empty()).then(|| {
        let scale = if req.lora_scale == 0.0 {
            1.0
        } else {
            req.lora_scale
        };
        (req.lora_adapter.trim(), scale, "LoraScale")
    });
    let listed = names.iter().enumerate().map(|(i, name)| {
        (
            name.trim(),
            scales.get(i).copied().unwrap_or(1.0),
            "LoraScales",
        )
    });
    single
        .into_iter()
        .chain(listed)
        .map(|(name, scale, field)| {
            if name.is_empty() {
                return Err("ModelOptions.LoraAdapters has an empty name".to_string());
            }
            if !scale.is_finite() {
                return Err(format!(
                    "ModelOptions.{field}: {scale} is not a finite number"
                ));
            }
            Ok(AdapterSpec {
                name: name.to_string(),
                scale,
            })
        })
        .collect()
}

impl LoadConfig {
    /// Parses and validates; a known option with a bad value is an error naming it, at most
    /// 1 KiB long (`error::bounded`) whatever the request quoted.
    pub fn from_request(req: &LoadRequest, env: &dyn Env) -> Result<LoadConfig, String> {
        LoadConfig::parse_request(req, env).map_err(|e| crate::error::bounded(&e).into_owned())
    }

    fn parse_request(req: &LoadRequest, env: &dyn Env) -> Result<LoadConfig, String> {
        check_request(req)?;
        let mut c = LoadConfig::defaults(req, env);
        c.set_cache_type_fields(req)?;
        let options = parse_options(&req.options);
        validate::check_kv_conflict(req, &options)?;
        let named = |key: &str| options.iter().any(|(k, _)| k == key);
        let (drafting_given, fuse_given) = (named("speculative"), named("fuse"));
        let (given, p2p) = c.set_options(options)?;
        c.set_cluster_fallbacks(given, env)?;
        c.p2p = p2p.settle(c.cluster.hostfile.is_some(), env)?;
        if let Some(p) = &c.p2p {
            c.cluster.token = Some(p.token.clone());
        }
        c.settle_drafting(&req.draft_model, drafting_given)?;
        c.adapters.adapters = adapters_of(req)?;
        c.check_shipping()?;
        c.check_fuse(fuse_given)?;
        c.settle_numerics(env)?;
        Ok(c)
    }
}
