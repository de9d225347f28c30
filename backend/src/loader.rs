//! A model folder to a ready model: config, strict weights, tokenizer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use std::io::Read;

use crate::cache::KvFormat;
use crate::error::{read_json, Error, Result};
use crate::models::common::RankPart;
use crate::models::{self, LanguageModel, LocalModel, Transformer};
use crate::tokenizer::Tokenizer;
use crate::weights::{safetensors_files, WeightMode, Weights};

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
    let part = load_part(dir, mode, &RankPart::full())?;
    part.serve(|t| Ok(Box::new(LocalModel::new(t, kv)?)))
}

/// Loads this rank's part of the model in `dir`.
pub fn load_part(dir: &Path, mode: WeightMode, part: &RankPart) -> Result<LoadedPart> {
    let start = Instant::now();
    let config: Value = read_json(&dir.join("config.json"))?;
    let tokenizer = Arc::new(Tokenizer::load(dir)?);
    let weights = Weights::open(dir, &config, mode)?;
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
/// dequantized, 2 for a 16-bit one; measured: a 4-bit 76 MB checkpoint holds 587 MB).
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
    Ok(match (mode, bits) {
        // Packed codes, scales and biases as stored.
        (WeightMode::PackedF32, Some(_)) => stored,
        (_, Some(bits)) => stored.saturating_mul(32 / bits),
        (_, None) => stored.saturating_mul(2),
    })
}

/// A safetensors file's JSON header, as stored (its first 8 bytes give the length).
fn safetensors_header(file: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(file).map_err(Error::io(file))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(Error::io(file))?;
    let header_len = u64::from_le_bytes(len).min(100 << 20) as usize;
    let mut header = vec![0u8; header_len];
    f.read_exact(&mut header).map_err(Error::io(file))?;
    Ok(header)
}

/// What identifies a model on every rank without reading its weights: config.json, and
/// each safetensors file's name, size and header (names, dtypes, shapes, offsets).
pub fn fingerprint(dir: &Path) -> Result<String> {
    let mut bytes =
        std::fs::read(dir.join("config.json")).map_err(Error::io(dir.join("config.json")))?;
    for file in safetensors_files(dir)? {
        let size = std::fs::metadata(&file).map_err(Error::io(&file))?.len();
        bytes.extend(file.file_name().unwrap_or_default().as_encoded_bytes());
        bytes.extend(size.to_le_bytes());
        bytes.extend(safetensors_header(&file)?);
    }
    Ok(crate::distributed::wire::digest(&bytes))
}

/// Stored bytes of each of the `layers` decoder layers (`model.layers.{i}.*`), from the
/// safetensors headers alone: what a pipeline balances (a MoE layer weighs many dense ones).
pub fn layer_bytes(dir: &Path, layers: usize) -> Result<Vec<u64>> {
    let mut bytes = vec![0u64; layers];
    for file in safetensors_files(dir)? {
        let header: Value = serde_json::from_slice(&safetensors_header(&file)?).map_err(|e| {
            Error::Weights(format!("{}: bad safetensors header: {e}", file.display()))
        })?;
        let Some(entries) = header.as_object() else {
            continue;
        };
        for (key, entry) in entries {
            let layer = crate::models::common::keys::layer_of(key);
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
