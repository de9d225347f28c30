//! A model folder to a ready model: config, strict weights, tokenizer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::error::{read_json, Result};
use crate::models::{self, LanguageModel};
use crate::tokenizer::Tokenizer;
use crate::weights::{WeightMode, Weights};

pub struct LoadedModel {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Arc<Tokenizer>,
    pub config: Value,
    pub dir: PathBuf,
}

/// Loads the model in `dir` (a local folder) with the given weight mode.
pub fn load(dir: &Path, mode: WeightMode) -> Result<LoadedModel> {
    let start = Instant::now();
    let config: Value = read_json(&dir.join("config.json"))?;
    let tokenizer = Arc::new(Tokenizer::load(dir)?);
    let weights = Weights::open(dir, &config, mode)?;
    let model = models::build(&config, weights)?;
    tracing::info!(dir = %dir.display(), ?mode, secs = start.elapsed().as_secs_f64(), "model loaded");
    Ok(LoadedModel {
        model,
        tokenizer,
        config,
        dir: dir.to_owned(),
    })
}
