//! The key store: the checkpoint's arrays, each taken once by key with its shape checked.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use mlx_rs::Array;
use serde_json::Value;

use super::quant::QuantConfig;
use super::reads::PartReads;
use super::WeightMode;
use crate::error::{read_json, Error, Result};
use crate::lora::Updates;
use crate::safetensors::{tensor_index, Stored};

/// The safetensors files of a model folder: one file, or shards listed in an index.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let index: Value = read_json(&index)?;
        let map = index["weight_map"]
            .as_object()
            .ok_or_else(|| Error::Weights(format!("{}: no weight_map", dir.display())))?;
        let files: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::Weights(format!(
        "{}: no model.safetensors or model.safetensors.index.json",
        dir.display()
    )))
}

/// The checkpoint's arrays (lazy until evaluated), taken one by one by the model builder.
pub struct Weights {
    pub(super) tensors: HashMap<String, Array>,
    /// Where each tensor of the files lies, so a tensor split reads a rank's part alone
    /// (the whole tensor's lazy array is then never evaluated, so never read).
    pub(super) stored: HashMap<String, Stored>,
    pub(super) quant: QuantConfig,
    pub(super) mode: WeightMode,
    /// Packed layers whose format has no vector kernel on this CPU (they run the portable one).
    pub(super) portable: Vec<String>,
    /// Packed layers that `cpu_numerics:int8` leaves exact (no integer kernel for their
    /// format here).
    pub(super) exact_under_int8: Vec<String>,
    /// LoRA updates still to be taken by their linear layers.
    pub(super) updates: Updates,
    /// Where the tensors read as parts are noted, when a caller asks.
    pub(super) part_reads: Option<PartReads>,
    /// Keys a wrapper's mapping renamed, to the checkpoint's own names (what shipping reads).
    pub(super) renamed: HashMap<String, String>,
}

impl Weights {
    /// Opens every safetensors file of `dir`; `config` is its parsed config.json.
    pub fn open(dir: &Path, config: &Value, mode: WeightMode) -> Result<Weights> {
        let (mut tensors, mut stored) = (HashMap::new(), HashMap::new());
        for file in safetensors_files(dir)? {
            let part = Array::load_safetensors(&file)
                .map_err(|e| Error::Weights(format!("{}: {e}", file.display())))?;
            tensors.extend(part);
            stored.extend(tensor_index(&file)?);
        }
        let mut weights = Weights::from_arrays(tensors, config, mode)?;
        weights.stored = stored;
        Ok(weights)
    }

    /// For tests: weights from arrays in memory.
    pub fn from_arrays(
        tensors: HashMap<String, Array>,
        config: &Value,
        mode: WeightMode,
    ) -> Result<Weights> {
        Ok(Weights {
            tensors,
            stored: HashMap::new(),
            quant: QuantConfig::from_config(config)?,
            mode,
            portable: Vec::new(),
            exact_under_int8: Vec::new(),
            updates: Updates::default(),
            part_reads: None,
            renamed: HashMap::new(),
        })
    }

    pub fn mode(&self) -> WeightMode {
        self.mode
    }

    /// The packed layers taken so far that `cpu_numerics:int8` leaves exact.
    pub fn exact_under_int8(&self) -> &[String] {
        &self.exact_under_int8
    }

    /// The packed layers taken so far that run the portable kernel on this CPU.
    pub fn portable_layers(&self) -> &[String] {
        &self.portable
    }

    /// Every key not taken yet.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains_key(key)
    }

    /// The shape of a key not taken yet (what a `sanitize` decides a conversion by).
    pub fn shape_of(&self, key: &str) -> Option<&[i32]> {
        self.tensors.get(key).map(Array::shape)
    }

    /// Takes a key whose shape must be `shape`.
    pub fn take(&mut self, key: &str, shape: &[i32]) -> Result<Array> {
        let array = self
            .tensors
            .remove(key)
            .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))?;
        if array.shape() != shape {
            return Err(Error::Weights(format!(
                "key `{key}` has shape {:?}, expected {shape:?}",
                array.shape()
            )));
        }
        Ok(array)
    }

    /// Takes a key whatever its shape, for a layout conversion whose result is checked when
    /// taken again (DeepSeek-V3's `kv_b_proj` split).
    pub fn take_unchecked(&mut self, key: &str) -> Result<Array> {
        self.tensors
            .remove(key)
            .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))
    }

    /// Puts a converted tensor where the model builder will take it.
    pub fn insert(&mut self, key: &str, array: Array) {
        self.stored.remove(key);
        self.tensors.insert(key.to_string(), array);
    }

    /// Takes a float parameter (norm weight, bias), converted for the weight mode.
    pub fn take_float(&mut self, key: &str, shape: &[i32]) -> Result<Array> {
        let array = self.take(key, shape)?;
        self.to_compute_dtype(array)
    }

    /// Hugging Face's per-expert layout (`{expert(e)}.weight`, ...) stacked into one
    /// `{stacked}.*` tensor per part, as mlx-lm's `sanitize` does; a checkpoint that already
    /// stores `{stacked}.weight` is left as it is. A missing expert is an error naming its key.
    pub fn stack_experts(
        &mut self,
        stacked: &str,
        expert: impl Fn(usize) -> String,
        count: usize,
    ) -> Result<()> {
        if self.contains(&format!("{stacked}.weight")) {
            return Ok(());
        }
        for part in ["weight", "scales", "biases"] {
            if !self.contains(&format!("{}.{part}", expert(0))) {
                continue;
            }
            let parts = (0..count)
                .map(|e| {
                    let key = format!("{}.{part}", expert(e));
                    self.tensors
                        .remove(&key)
                        .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))
                })
                .collect::<Result<Vec<_>>>()?;
            let joined = mlx_rs::ops::stack(&parts, 0).map_err(|e| {
                Error::Weights(format!("`{}.{part}`: experts do not stack: {e}", expert(0)))
            })?;
            self.tensors.insert(format!("{stacked}.{part}"), joined);
        }
        Ok(())
    }

    /// Renames every key as `map` says, dropping those it maps to `None` (a wrapper
    /// checkpoint's text model taken out of its prefix, its towers dropped); the quantization
    /// overrides follow their layers, and the checkpoint's names stay known for shipping.
    pub fn rename_keys(&mut self, map: impl Fn(&str) -> Option<String>) {
        let tensors = std::mem::take(&mut self.tensors);
        for (key, array) in tensors {
            let Some(new) = map(&key) else {
                continue;
            };
            if let Some(stored) = self.stored.remove(&key) {
                self.stored.insert(new.clone(), stored);
            }
            if new != key {
                self.renamed.insert(new.clone(), key);
            }
            self.tensors.insert(new, array);
        }
        self.quant.rename(&map);
    }

    /// The checkpoint's own name for `key` (renamed by [`Self::rename_keys`] or not).
    pub(super) fn original<'a>(&'a self, key: &'a str) -> &'a str {
        self.renamed.get(key).map_or(key, String::as_str)
    }

    /// Drops every key `drop` picks (what a family's checkpoints carry that no model uses).
    pub fn drop_keys(&mut self, drop: impl Fn(&str) -> bool) {
        self.tensors.retain(|key, _| !drop(key));
    }

    /// Fails on any key left over that `ignored` (other ranks' parts) does not cover: the
    /// builder took every key the model uses, and `sanitize` dropped what it never uses.
    pub fn finish(self, ignored: impl Fn(&str) -> bool) -> Result<()> {
        let left: Vec<&str> = (self.updates.left().into_iter())
            .filter(|layer| !ignored(&format!("{layer}.weight")))
            .collect();
        if !left.is_empty() {
            return Err(crate::lora::unused(&left));
        }
        let mut unexpected: Vec<&String> = self.tensors.keys().filter(|k| !ignored(k)).collect();
        if unexpected.is_empty() {
            return Ok(());
        }
        unexpected.sort();
        let shown: Vec<&str> = unexpected.iter().take(5).map(|k| k.as_str()).collect();
        Err(Error::Weights(format!(
            "{} unexpected key(s) in the checkpoint: {}{}",
            unexpected.len(),
            shown.join(", "),
            if unexpected.len() > 5 { ", ..." } else { "" }
        )))
    }
}
