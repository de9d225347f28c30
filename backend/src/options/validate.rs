//! The checks that span options: settings that contradict each other, or that need
//! another to mean anything, are refused naming both.

use super::config::LoadConfig;
use super::env::Env;
use super::parse::OptionValue;
use super::LoadRequest;
use crate::speculative::Drafting;
use crate::weights::{Numerics, WeightMode};

/// `kv_bits` sets both sides of the KV cache; beside a `cache_type_*` option or a
/// `CacheTypeKey`/`CacheTypeValue` field one of them would be dropped silently, so it is a
/// conflict naming both.
pub(super) fn check_kv_conflict(
    req: &LoadRequest,
    options: &[(String, OptionValue)],
) -> Result<(), String> {
    if !options.iter().any(|(k, _)| k == "kv_bits") {
        return Ok(());
    }
    let named = |key: &str| options.iter().any(|(k, _)| k == key);
    let other = [
        ("the option `cache_type_k`", named("cache_type_k")),
        ("the option `cache_type_v`", named("cache_type_v")),
        (
            "ModelOptions.CacheTypeKey",
            !req.cache_type_key.trim().is_empty(),
        ),
        (
            "ModelOptions.CacheTypeValue",
            !req.cache_type_value.trim().is_empty(),
        ),
    ]
    .into_iter()
    .find(|(_, set)| *set);
    match other {
        Some((what, _)) => Err(format!(
            "the option `kv_bits` and {what} both set how the KV cache is stored: keep one"
        )),
        None => Ok(()),
    }
}

impl LoadConfig {
    /// A DraftModel drafts unless the `speculative` option says otherwise, which is then an
    /// error (the model would be loaded for nothing); `speculative:draft` needs one.
    pub(super) fn settle_drafting(&mut self, draft_model: &str, given: bool) -> Result<(), String> {
        let draft = draft_model.trim();
        self.spec.draft_model = (!draft.is_empty()).then(|| draft.to_string());
        match (self.spec.draft_model.is_some(), self.spec.drafting) {
            (true, Drafting::Off) if !given => self.spec.drafting = Drafting::Model,
            (true, Drafting::Model) | (false, Drafting::Off | Drafting::Ngram) => {}
            (true, other) => {
                return Err(format!(
                    "ModelOptions.DraftModel is set, but the option `speculative` is {other:?}: \
                     remove one of them"
                ))
            }
            (false, Drafting::Model) => {
                return Err(
                    "the option `speculative:draft` needs ModelOptions.DraftModel (draft_model)"
                        .into(),
                )
            }
        }
        Ok(())
    }

    /// `ship_model` needs workers to ship to, and ships the checkpoint alone.
    pub(super) fn check_shipping(&self) -> Result<(), String> {
        if !self.shipping.ship_model {
            return Ok(());
        }
        if self.cluster.hostfile.is_none() {
            return Err(
                "option `ship_model`: there is no cluster to ship to (no hostfile \
                        option or MLX_DISTRIBUTED_HOSTFILE)"
                    .into(),
            );
        }
        if !self.adapters.adapters.is_empty() {
            return Err(
                "option `ship_model`: LoRA adapters are not shipped; give every \
                        machine the adapters, or load without them"
                    .into(),
            );
        }
        Ok(())
    }

    /// `fuse` says how adapters are applied, so it needs one to apply.
    pub(super) fn check_fuse(&self, fuse_given: bool) -> Result<(), String> {
        match fuse_given && self.adapters.adapters.is_empty() {
            true => Err("the option `fuse` applies to LoRA adapters, and \
                         ModelOptions.LoraAdapter(s) names none"
                .into()),
            false => Ok(()),
        }
    }

    /// The packed kernels' numerics: the option, else `MLX_DISTRIBUTED_CPU_NUMERICS`, else
    /// `int8`. Asked for, `int8` needs packed weights on the CPU; as the default it leaves
    /// `dequantize:true` and MLX's own kernels (Metal) alone.
    pub(super) fn settle_numerics(&mut self, env: &dyn Env) -> Result<(), String> {
        let (numerics, asked) = match self.cpu_numerics {
            Some(n) => (n, true),
            None => super::env::numerics(env)?,
        };
        self.cpu_numerics = Some(numerics);
        self.weight_mode = match (numerics, self.weight_mode) {
            (Numerics::Int8, WeightMode::DequantizeF32) if asked => {
                return Err(
                    "the option `cpu_numerics:int8` multiplies packed weights, and \
                            `dequantize:true` unpacks them: give one of the two"
                        .into(),
                )
            }
            (Numerics::Int8, WeightMode::AsStored) if asked => {
                return Err(
                    "the option `cpu_numerics` applies to the CPU's packed kernels; \
                            here MLX's own kernels multiply the weights as stored"
                        .into(),
                )
            }
            (_, mode) => mode.with_numerics(numerics),
        };
        Ok(())
    }
}
