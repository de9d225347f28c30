//! LoRA adapters (`ModelOptions.LoraAdapter(s)`, `LoraScale(s)`): mlx-lm's and PEFT's files,
//! read into one low-rank update per linear layer, cut as the layer's weight is cut, then fused
//! into dense weights at load or added at run time (`y = x W^T + (x A) B`).

mod format;

use std::collections::HashMap;
use std::path::PathBuf;

use mlx_rs::ops::{concatenate, matmul};
use mlx_rs::{Array, Dtype};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use format::{MLX_FILE, PEFT_FILE};

/// How adapters meet the weights (option `fuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Merge {
    /// Into dense weights at load, as mlx-lm's `fuse`: nothing more per token. Quantized
    /// weights still take their update at run time, as mlx-lm applies adapters to them.
    #[default]
    Fuse,
    /// Every adapted layer adds `(x A) B` at every step.
    RunTime,
}

/// One adapter asked for: a folder or repo id, and the user's scale on top of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterSpec {
    pub name: String,
    pub scale: f32,
}

/// The adapters a load applies, the same on every rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdapterPlan {
    pub adapters: Vec<AdapterSpec>,
    pub merge: Merge,
}

/// The plan with its folders found: what a rank reads when it builds its part.
#[derive(Debug, Clone, Default)]
pub struct Adapters {
    folders: Vec<(PathBuf, f32)>,
    merge: Merge,
}

impl Adapters {
    /// `folders` (each with its user scale), merged into the weights as `merge` says.
    pub fn new(folders: Vec<(PathBuf, f32)>, merge: Merge) -> Adapters {
        Adapters { folders, merge }
    }

    /// No adapter: the model as stored.
    pub const NONE: Adapters = Adapters {
        folders: Vec::new(),
        merge: Merge::Fuse,
    };

    /// Every adapter's updates, several on one layer joined along the rank (the scales are in
    /// each `B` already, so one product pair applies them all).
    pub fn read(&self) -> Result<Updates> {
        let mut layers: HashMap<String, Vec<format::Update>> = HashMap::new();
        for (dir, scale) in &self.folders {
            for (layer, update) in format::read(dir, *scale)? {
                layers.entry(layer).or_default().push(update);
            }
        }
        let layers = layers
            .into_iter()
            .map(|(layer, updates)| Ok((layer, join(updates)?)))
            .collect::<Result<_>>()?;
        Ok(Updates {
            layers,
            merge: self.merge,
        })
    }

    /// What identifies these adapters on every rank without reading their weights: each
    /// config, weights file size and header, scale, and the merge (`None`: no adapter).
    pub fn identity(&self) -> Result<Option<Vec<u8>>> {
        if self.folders.is_empty() {
            return Ok(None);
        }
        let mut bytes = format!("{:?}", self.merge).into_bytes();
        for (dir, scale) in &self.folders {
            let config = dir.join("adapter_config.json");
            bytes.extend(std::fs::read(&config).map_err(Error::io(&config))?);
            for file in [MLX_FILE, PEFT_FILE].map(|f| dir.join(f)) {
                if file.is_file() {
                    bytes.extend(crate::safetensors::file_identity(&file)?);
                }
            }
            bytes.extend(scale.to_le_bytes());
        }
        Ok(Some(bytes))
    }
}

/// Several updates of one layer as one: `[A1 A2]` and `[B1; B2]`, in f32 if their dtypes differ.
fn join(mut updates: Vec<format::Update>) -> Result<LowRank> {
    if updates.len() == 1 {
        let u = updates.remove(0);
        return Ok(LowRank { a: u.a, b: u.b });
    }
    let same = updates.iter().all(|u| u.a.dtype() == updates[0].a.dtype());
    let cast = |x: &Array| match same {
        true => Ok(x.clone()),
        false => x.as_dtype(Dtype::Float32),
    };
    let a: Vec<Array> = updates
        .iter()
        .map(|u| cast(&u.a))
        .collect::<Result<_, _>>()?;
    let b: Vec<Array> = updates
        .iter()
        .map(|u| cast(&u.b))
        .collect::<Result<_, _>>()?;
    Ok(LowRank {
        a: concatenate(&a, 1)?,
        b: concatenate(&b, 0)?,
    })
}

/// Every adapted layer's update, each taken once as the model builds that layer.
#[derive(Default)]
pub struct Updates {
    layers: HashMap<String, LowRank>,
    merge: Merge,
}

impl Updates {
    pub fn merge(&self) -> Merge {
        self.merge
    }

    /// The whole update of the linear layer `layer` (`in_dim -> out_dim`), once.
    pub fn take(&mut self, layer: &str, in_dim: i32, out_dim: i32) -> Result<Option<LowRank>> {
        let Some(update) = self.layers.remove(layer) else {
            return Ok(None);
        };
        let (a_in, b_out) = (update.a.shape()[0], update.b.shape()[1]);
        if (a_in, b_out) != (in_dim, out_dim) {
            return Err(Error::Adapter(format!(
                "`{layer}` maps {a_in} inputs to {b_out} outputs, and the model's layer maps \
                 {in_dim} to {out_dim}: the adapter was made for another model"
            )));
        }
        Ok(Some(update))
    }

    /// One layer's update, for tests of what takes it.
    #[cfg(test)]
    pub(crate) fn of(layer: &str, update: LowRank, merge: Merge) -> Updates {
        Updates {
            layers: HashMap::from([(layer.to_string(), update)]),
            merge,
        }
    }

    /// The layers no linear layer of this rank took, sorted.
    pub fn left(&self) -> Vec<&str> {
        let mut left: Vec<&str> = self.layers.keys().map(String::as_str).collect();
        left.sort();
        left
    }
}

/// A layer's low-rank update `(x A) B`: `A` is `[in, r]`, `B` is `[r, out]` and scaled.
pub struct LowRank {
    pub a: Array,
    pub b: Array,
}

impl LowRank {
    /// `y + (x A) B`, in `y`'s dtype (as mlx-lm's `LoRALinear` casts its term).
    pub fn add_to(&self, x: &Array, y: Array) -> Result<Array> {
        let z = matmul(matmul(x, &self.a)?, &self.b)?;
        let z = match z.dtype() == y.dtype() {
            true => z,
            false => z.as_dtype(y.dtype())?,
        };
        Ok(y.add(z)?)
    }

    /// `W + B^T A^T` in `W`'s dtype, as mlx-lm's `fuse` (the update computed in the factors'
    /// dtype first).
    pub fn fuse_into(&self, weight: &Array) -> Result<Array> {
        let delta = matmul(self.b.t(), self.a.t())?;
        Ok(weight.add(delta.as_dtype(weight.dtype())?)?)
    }

    /// The factors in `convert`'s dtype (the weight mode's compute dtype).
    pub fn map(self, convert: impl Fn(Array) -> Result<Array>) -> Result<LowRank> {
        Ok(LowRank {
            a: convert(self.a)?,
            b: convert(self.b)?,
        })
    }

    pub fn arrays(&self) -> Vec<&Array> {
        vec![&self.a, &self.b]
    }
}

/// Error for `Updates` left over once the model is built: layers the model lacks (an adapter
/// for another model) or that this backend does not adapt.
pub fn unused(layers: &[&str]) -> Error {
    let shown: Vec<String> = layers
        .iter()
        .take(5)
        .map(|l| format!("`{}`", crate::error::quote(l)))
        .collect();
    Error::Adapter(format!(
        "{} adapted layer(s) match no linear layer of the model: {}{}. Either the adapter was \
         made for another model, or it adapts what this backend does not: LoRA applies to the \
         attention and MLP projections and the output head, not to embeddings, routed experts \
         or per-head matrices",
        layers.len(),
        shown.join(", "),
        if layers.len() > 5 { ", ..." } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::random;

    fn update(r: i32, in_dim: i32, out_dim: i32) -> LowRank {
        let key = random::key(7).ok();
        LowRank {
            a: random::normal::<f32>(&[in_dim, r], None, None, key.as_ref()).unwrap(),
            b: random::normal::<f32>(&[r, out_dim], None, None, key.as_ref()).unwrap(),
        }
    }

    fn updates(layer: &str, u: LowRank) -> Updates {
        Updates {
            layers: HashMap::from([(layer.to_string(), u)]),
            merge: Merge::RunTime,
        }
    }

    fn max_diff(x: &Array, y: &Array) -> f32 {
        x.subtract(y)
            .unwrap()
            .abs()
            .unwrap()
            .max(None)
            .unwrap()
            .item_exact::<f32>()
    }

    #[test]
    fn fused_weight_equals_the_update_at_run_time() {
        let (r, i, o) = (4, 16, 12);
        let u = update(r, i, o);
        let w = random::normal::<f32>(&[o, i], None, None, None).unwrap();
        let x = random::normal::<f32>(&[3, i], None, None, None).unwrap();
        let fused = matmul(&x, u.fuse_into(&w).unwrap().t()).unwrap();
        let run_time = u.add_to(&x, matmul(&x, w.t()).unwrap()).unwrap();
        assert!(max_diff(&fused, &run_time) < 1e-4);
    }

    #[test]
    fn an_update_for_another_shape_names_the_layer() {
        let mut u = updates("model.layers.0.mlp.up_proj", update(2, 8, 6));
        let err = u
            .take("model.layers.0.mlp.up_proj", 8, 7)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("up_proj") && err.contains("another model"),
            "{err}"
        );
        let err = unused(&["model.embed_tokens"]).to_string();
        assert!(err.contains("`model.embed_tokens`"), "{err}");
    }
}
