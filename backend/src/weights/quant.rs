//! MLX's quantization modes as config.json declares them (affine, mxfp4, mxfp8, nvfp4), and a
//! quantized matrix taken as stored, with the checks that name a bad layer.

use std::collections::HashMap;

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use super::{Shape, Weights};
use crate::error::{quote, Error, Result};

/// MLX 0.32.2's quantization modes (`mx.quantize`'s table): affine keeps a float scale and
/// bias per group; the float modes keep FP4 (E2M1) or FP8 (E4M3) codes and one 8-bit scale
/// per group (E8M0 for mx, E4M3 for nv), stored as uint8, and no bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMode {
    Affine,
    Mxfp4,
    Mxfp8,
    Nvfp4,
}

impl QuantMode {
    fn parse(name: &str) -> Option<QuantMode> {
        Some(match name {
            "affine" => QuantMode::Affine,
            "mxfp4" => QuantMode::Mxfp4,
            "mxfp8" => QuantMode::Mxfp8,
            "nvfp4" => QuantMode::Nvfp4,
            _ => return None,
        })
    }

    /// The name MLX and config.json use.
    pub fn name(self) -> &'static str {
        match self {
            QuantMode::Affine => "affine",
            QuantMode::Mxfp4 => "mxfp4",
            QuantMode::Mxfp8 => "mxfp8",
            QuantMode::Nvfp4 => "nvfp4",
        }
    }

    /// Group size and bits when config.json leaves them out (mlx's `_defaults_for_mode`).
    fn defaults(self) -> (i64, i64) {
        match self {
            QuantMode::Affine => (64, 4),
            QuantMode::Mxfp4 => (32, 4),
            QuantMode::Mxfp8 => (32, 8),
            QuantMode::Nvfp4 => (16, 4),
        }
    }

    /// Whether the mode stores a bias per group (affine alone).
    pub fn has_biases(self) -> bool {
        self == QuantMode::Affine
    }

    /// Whether `dtype` is this mode's scale dtype: uint8 for the float modes, a float for
    /// affine.
    fn scales_fit(self, dtype: Dtype) -> bool {
        match self {
            QuantMode::Affine => matches!(dtype, Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16),
            _ => dtype == Dtype::Uint8,
        }
    }
}

/// Group size, bits and mode of an MLX-quantized matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
    pub mode: QuantMode,
}

/// A quantized matrix as the checkpoint stores it (this rank's part of it): packed codes,
/// scales, and biases in affine mode alone.
pub struct QuantizedMatrix {
    pub weight: Array,
    pub scales: Array,
    pub biases: Option<Array>,
    pub q: QuantParams,
}

/// `config.json` `"quantization"`: defaults plus the per-layer overrides mlx-lm writes.
#[derive(Debug, Default)]
pub(super) struct QuantConfig {
    default: Option<QuantParams>,
    overrides: HashMap<String, QuantParams>,
}

impl QuantConfig {
    pub(super) fn from_config(config: &Value) -> Result<QuantConfig> {
        let q = match (
            config.get("quantization"),
            config.get("quantization_config"),
        ) {
            (Some(q), _) => q.clone(),
            (None, Some(q)) => from_quant_method(q)?,
            (None, None) => return Ok(QuantConfig::default()),
        };
        let mut overrides = HashMap::new();
        if let Some(map) = q.as_object() {
            for (key, value) in map {
                if value.is_object() {
                    let what = format!("layer `{}`", quote(key));
                    overrides.insert(key.clone(), QuantParams::from_json(value, &what)?);
                }
            }
        }
        Ok(QuantConfig {
            default: Some(QuantParams::from_json(&q, "every quantized layer")?),
            overrides,
        })
    }

    /// The overrides under the names `map` gives their layers (dropped where it drops them).
    pub(super) fn rename(&mut self, map: impl Fn(&str) -> Option<String>) {
        let overrides = std::mem::take(&mut self.overrides);
        self.overrides = (overrides.into_iter())
            .filter_map(|(key, q)| Some((map(&key)?, q)))
            .collect();
    }

    fn for_layer(&self, prefix: &str) -> Result<QuantParams> {
        self.overrides
            .get(prefix)
            .copied()
            .or(self.default)
            .ok_or_else(|| {
                Error::Weights(format!(
                    "`{prefix}` is quantized but config.json has no \"quantization\""
                ))
            })
    }
}

/// A Hugging Face `quantization_config` as mlx-lm reads one without `quantization`: its
/// `quant_method` names the float modes; without one it is mlx-lm's own copy.
fn from_quant_method(q: &Value) -> Result<Value> {
    let Some(method) = q.get("quant_method") else {
        return Ok(q.clone());
    };
    match method.as_str() {
        Some(m @ ("mxfp4" | "mxfp8")) => Ok(serde_json::json!({ "mode": m })),
        _ => Err(Error::Weights(format!(
            "config.json \"quantization_config\": quant_method {} is not supported (mxfp4, \
             mxfp8, or mlx-lm's \"quantization\")",
            quote(&method.to_string())
        ))),
    }
}

impl QuantParams {
    fn from_json(value: &Value, what: &str) -> Result<QuantParams> {
        let bad =
            |e: String| Error::Weights(format!("config.json \"quantization\" of {what}: {e}"));
        let mode = match value.get("mode") {
            None => QuantMode::Affine,
            Some(m) => m.as_str().and_then(QuantMode::parse).ok_or_else(|| {
                bad(format!(
                    "quantization mode {} is not supported (affine, mxfp4, mxfp8 or nvfp4)",
                    quote(&m.to_string())
                ))
            })?,
        };
        if value
            .get("global_scale")
            .is_some_and(|g| g != &Value::Bool(false))
        {
            return Err(bad(format!(
                "{} global scales are not supported (MLX 0.32.2's kernels take none)",
                mode.name()
            )));
        }
        let (group, bits) = mode.defaults();
        let int = |name: &str, default: i64| match value.get(name) {
            None => Ok(default),
            Some(v) => v.as_i64().ok_or_else(|| {
                bad(format!(
                    "{name} {} is not an integer",
                    quote(&v.to_string())
                ))
            }),
        };
        let small = |name: &str, v: i64| {
            i32::try_from(v).map_err(|_| bad(format!("{name} {v} is out of range")))
        };
        let q = QuantParams {
            group_size: small("group_size", int("group_size", group)?)?,
            bits: small("bits", int("bits", bits)?)?,
            mode,
        };
        q.check().map_err(bad)?;
        Ok(q)
    }

    /// MLX's rules: affine as `quant-cpu`'s formats (bits 2-8, groups 32/64/128); each float
    /// mode has one group size and one width.
    fn check(&self) -> std::result::Result<(), String> {
        if self.mode == QuantMode::Affine {
            return quant_cpu::Format::new(self.bits as u32, self.group_size as usize)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        let (group, bits) = self.mode.defaults();
        if (i64::from(self.group_size), i64::from(self.bits)) != (group, bits) {
            return Err(format!(
                "{} takes group size {group} and {bits} bits, not group size {} and {} bits",
                self.mode.name(),
                self.group_size,
                self.bits
            ));
        }
        Ok(())
    }
}

impl Weights {
    /// The quantized matrix at `prefix` for a matrix of `shape`, or `None` if stored dense.
    pub(super) fn take_quantized(
        &mut self,
        prefix: &str,
        shape: Shape,
    ) -> Result<Option<QuantizedMatrix>> {
        if !self.contains(&format!("{prefix}.scales")) {
            return Ok(None);
        }
        let q = self.quant.for_layer(prefix)?;
        let global = format!("{prefix}.global_scale");
        if self.contains(&global) {
            return Err(Error::Weights(format!(
                "`{global}`: {} global scales are not supported (MLX 0.32.2's kernels take none)",
                q.mode.name()
            )));
        }
        let cols = shape.cols;
        // In i64: the product must not wrap into a negative "expected" shape.
        let packed_bits = i64::from(cols) * i64::from(q.bits);
        let packed = i32::try_from(packed_bits / 32)
            .ok()
            .filter(|_| packed_bits % 32 == 0);
        let (Some(packed), 0) = (packed, cols % q.group_size) else {
            return Err(Error::Weights(format!(
                "`{prefix}`: {cols} inputs do not fit group size {} and {} bits",
                q.group_size, q.bits
            )));
        };
        let groups = shape.with_cols(cols / q.group_size);
        let (weight_key, scales_key) = (format!("{prefix}.weight"), format!("{prefix}.scales"));
        // Dtypes first: a checkpoint in another mode is named as such, not by a shape.
        if let (Some(w), Some(s)) = (self.tensors.get(&weight_key), self.tensors.get(&scales_key)) {
            check_dtypes(prefix, q, w, s)?;
        }
        let weight = self.take(&weight_key, &shape.with_cols(packed))?;
        let scales = self.take(&scales_key, &groups)?;
        let biases = self.take_biases(prefix, q, &groups)?;
        Ok(Some(QuantizedMatrix {
            weight,
            scales,
            biases,
            q,
        }))
    }

    /// Affine's biases, which must be there; a float mode's, which must not.
    fn take_biases(
        &mut self,
        prefix: &str,
        q: QuantParams,
        groups: &[i32],
    ) -> Result<Option<Array>> {
        let key = format!("{prefix}.biases");
        match (q.mode.has_biases(), self.contains(&key)) {
            (true, _) => Ok(Some(self.take(&key, groups)?)),
            (false, false) => Ok(None),
            (false, true) => Err(Error::Weights(format!(
                "`{key}`: {} quantization has no biases, but the checkpoint stores them",
                q.mode.name()
            ))),
        }
    }
}

/// Codes packed in uint32, scales in the mode's dtype: anything else is named here rather than
/// failing inside MLX's kernels.
fn check_dtypes(prefix: &str, q: QuantParams, weight: &Array, scales: &Array) -> Result<()> {
    if weight.dtype() != Dtype::Uint32 {
        return Err(Error::Weights(format!(
            "`{prefix}.weight` is {:?}, but {} codes are packed in uint32",
            weight.dtype(),
            q.mode.name()
        )));
    }
    if !q.mode.scales_fit(scales.dtype()) {
        let want = match q.mode {
            QuantMode::Affine => "a float (f32, bf16 or f16)",
            QuantMode::Nvfp4 => "uint8 (E4M3)",
            _ => "uint8 (E8M0)",
        };
        return Err(Error::Weights(format!(
            "`{prefix}.scales` is {:?}, but {} scales are {want}",
            scales.dtype(),
            q.mode.name()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
