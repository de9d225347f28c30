//! A model folder to a ready model: config, strict weights, tokenizer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::cache::KvFormat;
use crate::error::{read_json, Error, Result};
use crate::lora::Adapters;
use crate::models::common::RankPart;
use crate::models::{self, LanguageModel, Layout, LocalModel, Transformer};
use crate::safetensors::{file_identity, safetensors_header};
use crate::tokenizer::Tokenizer;
use crate::weights::{safetensors_files, PartReads, WeightMode, Weights};

/// A model ready to serve.
pub struct LoadedModel {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Arc<Tokenizer>,
    pub config: Value,
    pub dir: PathBuf,
}

/// This rank's part of a model, loaded, before it is served alone or within a cluster.
pub struct LoadedPart {
    pub transformer: Box<dyn Transformer>,
    pub tokenizer: Arc<Tokenizer>,
    pub config: Value,
    pub dir: PathBuf,
}

impl LoadedPart {
    /// Serves the part as the model `wrap` makes of it (which may refuse it).
    pub fn serve(
        self,
        wrap: impl FnOnce(Box<dyn Transformer>) -> Result<Box<dyn LanguageModel>>,
    ) -> Result<LoadedModel> {
        Ok(LoadedModel {
            model: wrap(self.transformer)?,
            tokenizer: self.tokenizer,
            config: self.config,
            dir: self.dir,
        })
    }
}

/// Loads the model in `dir` (a local folder) with the given weight mode, whole, its caches
/// stored as computed.
pub fn load(dir: &Path, mode: WeightMode) -> Result<LoadedModel> {
    load_with_kv(dir, mode, KvFormat::default())
}

/// [`load`], with caches stored in `kv`.
pub fn load_with_kv(dir: &Path, mode: WeightMode, kv: KvFormat) -> Result<LoadedModel> {
    load_adapted(dir, Recipe::plain(mode), kv)
}

/// [`load_with_kv`], with the recipe's adapters.
pub fn load_adapted(dir: &Path, recipe: Recipe, kv: KvFormat) -> Result<LoadedModel> {
    let part = load_part(dir, recipe, &RankPart::full())?;
    part.serve(|t| Ok(Box::new(LocalModel::new(t, kv)?)))
}

/// What a load makes of a model folder, whichever part: the weight mode, and the LoRA
/// adapters on top.
#[derive(Clone, Copy)]
pub struct Recipe<'a> {
    pub mode: WeightMode,
    pub adapters: &'a Adapters,
}

/// No adapters, for loads that take none.
static NO_ADAPTERS: Adapters = Adapters::NONE;

impl Recipe<'static> {
    /// The checkpoint alone, in `mode`.
    pub fn plain(mode: WeightMode) -> Recipe<'static> {
        Recipe {
            mode,
            adapters: &NO_ADAPTERS,
        }
    }
}

/// Loads this rank's part of the model in `dir`.
pub fn load_part(dir: &Path, recipe: Recipe, part: &RankPart) -> Result<LoadedPart> {
    load_part_noting(dir, recipe, part, None)
}

/// [`load_part`], noting in `reads` the tensors read as parts (what tensor-mode shipping
/// derives each worker's share from).
pub fn load_part_noting(
    dir: &Path,
    recipe: Recipe,
    part: &RankPart,
    reads: Option<PartReads>,
) -> Result<LoadedPart> {
    let start = Instant::now();
    let mode = recipe.mode;
    let config: Value = read_json(&dir.join("config.json"))?;
    let tokenizer = Arc::new(Tokenizer::load(dir)?);
    let weights = Weights::open(dir, &config, mode)?
        .with_updates(recipe.adapters.read()?)
        .with_part_reads(reads);
    let transformer = models::build(&config, weights, part)?;
    tracing::info!(
        dir = %dir.display(),
        ?mode,
        secs = start.elapsed().as_secs_f64(),
        skinny_gemm = skinny_gemm::active(),
        "model loaded"
    );
    Ok(LoadedPart {
        transformer,
        tokenizer,
        config,
        dir: dir.to_owned(),
    })
}

/// About how many bytes the model in `dir` holds once loaded in `mode`: its safetensors
/// bytes, times the widening to f32 of the f32 modes (32 / bits for a quantized checkpoint
/// dequantized, also a float-mode one in the packed mode, 2 for a 16-bit one; measured: a 4-bit 76 MB checkpoint holds 587 MB).
pub fn resident_estimate(dir: &Path, mode: WeightMode) -> Result<u64> {
    let mut stored = 0u64;
    for file in safetensors_files(dir)? {
        stored += std::fs::metadata(&file).map_err(Error::io(&file))?.len();
    }
    if mode == WeightMode::AsStored {
        return Ok(stored);
    }
    let config: Value = read_json(&dir.join("config.json"))?;
    let bits = config["quantization"]["bits"]
        .as_u64()
        .filter(|b| (1..=32).contains(b));
    // Only affine has packed kernels: the packed mode dequantizes the float modes.
    let packs = config["quantization"]["mode"]
        .as_str()
        .is_none_or(|m| m == "affine");
    Ok(match (mode, bits) {
        // Packed codes, scales and biases as stored.
        (WeightMode::PackedF32 | WeightMode::PackedInt8, Some(_)) if packs => stored,
        (_, Some(bits)) => stored.saturating_mul(32 / bits),
        (_, None) => stored.saturating_mul(2),
    })
}

/// What identifies a model on every rank without reading its weights: config.json, and
/// each safetensors file's name, size and header (names, dtypes, shapes, offsets).
pub fn fingerprint(dir: &Path) -> Result<String> {
    let mut bytes =
        std::fs::read(dir.join("config.json")).map_err(Error::io(dir.join("config.json")))?;
    for file in safetensors_files(dir)? {
        bytes.extend(file_identity(&file)?);
    }
    Ok(crate::distributed::wire::digest(&bytes))
}

/// [`fingerprint`], and the adapters' when there are any: what every rank must agree on.
pub fn fingerprint_with(dir: &Path, adapters: &Adapters) -> Result<String> {
    let model = fingerprint(dir)?;
    Ok(match adapters.identity()? {
        None => model,
        Some(mut bytes) => {
            bytes.extend(model.as_bytes());
            crate::distributed::wire::digest(&bytes)
        }
    })
}

/// Stored bytes of each of the `layers` decoder layers (where `layout` keeps them), from the
/// safetensors headers alone: what a pipeline balances (a MoE layer weighs many dense ones).
pub fn layer_bytes(dir: &Path, layout: Layout, layers: usize) -> Result<Vec<u64>> {
    let mut bytes = vec![0u64; layers];
    for file in safetensors_files(dir)? {
        let header: Value = serde_json::from_slice(&safetensors_header(&file)?).map_err(|e| {
            Error::Weights(format!("{}: bad safetensors header: {e}", file.display()))
        })?;
        let Some(entries) = header.as_object() else {
            continue;
        };
        for (key, entry) in entries {
            let layer = layout.layer_of(key);
            let offsets = entry["data_offsets"].as_array();
            let size = offsets.and_then(|o| Some(o.get(1)?.as_u64()? - o.first()?.as_u64()?));
            if let (Some(i), Some(size)) = (layer, size) {
                if let Some(b) = bytes.get_mut(i) {
                    *b += size;
                }
            }
        }
    }
    Ok(bytes)
}

/// The model `model` names if it is on this machine (never downloaded): its fingerprint and
/// the bytes of its weights.
pub fn find_local(
    model: &str,
    model_path: Option<&Path>,
) -> Result<crate::distributed::protocol::ModelFound> {
    let dir = crate::source::resolve_local(model, model_path)?;
    let mut weight_bytes = 0;
    for file in safetensors_files(&dir)? {
        weight_bytes += std::fs::metadata(&file).map_err(Error::io(&file))?.len();
    }
    Ok(crate::distributed::protocol::ModelFound {
        fingerprint: fingerprint(&dir)?,
        weight_bytes,
    })
}
