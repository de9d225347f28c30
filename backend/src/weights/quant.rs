//! MLX's affine quantization as config.json declares it, and a quantized matrix taken as
//! stored.

use std::collections::HashMap;

use mlx_rs::Array;
use serde_json::Value;

use super::{Shape, Weights};
use crate::error::{Error, Result};

/// Group size and bits of an MLX affine-quantized matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
}

/// A quantized matrix as the checkpoint stores it (this rank's part of it).
pub(super) struct StoredQuantized {
    pub(super) weight: Array,
    pub(super) scales: Array,
    pub(super) biases: Array,
    pub(super) q: QuantParams,
}

/// `config.json` `"quantization"`: defaults plus the per-layer overrides mlx-lm writes.
#[derive(Debug, Default)]
pub(super) struct QuantConfig {
    default: Option<QuantParams>,
    overrides: HashMap<String, QuantParams>,
}

impl QuantConfig {
    pub(super) fn from_config(config: &Value) -> Result<QuantConfig> {
        let Some(q) = config
            .get("quantization")
            .or_else(|| config.get("quantization_config"))
        else {
            return Ok(QuantConfig::default());
        };
        let mut overrides = HashMap::new();
        if let Some(map) = q.as_object() {
            for (key, value) in map {
                if value.is_object() {
                    let what = format!("layer `{}`", crate::error::quote(key));
                    overrides.insert(key.clone(), QuantParams::from_json(value, &what)?);
                }
            }
        }
        Ok(QuantConfig {
            default: Some(QuantParams::from_json(q, "every quantized layer")?),
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

impl QuantParams {
    fn from_json(value: &Value, what: &str) -> Result<QuantParams> {
        let int = |name: &str, default: i64| {
            value.get(name).and_then(Value::as_i64).unwrap_or(default) as i32
        };
        let mode = value
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("affine");
        if mode != "affine" {
            return Err(Error::Weights(format!(
                "{what}: quantization mode `{mode}` is not supported (only affine)"
            )));
        }
        let q = QuantParams {
            group_size: int("group_size", 64),
            bits: int("bits", 4),
        };
        if let Err(e) = quant_cpu::Format::new(q.bits as u32, q.group_size as usize) {
            return Err(Error::Weights(format!(
                "config.json \"quantization\" of {what}: {e}"
            )));
        }
        Ok(q)
    }
}

impl Weights {
    /// The quantized triple at `prefix` for a matrix of `shape`, or `None` if stored dense.
    pub(super) fn take_quantized(
        &mut self,
        prefix: &str,
        shape: Shape,
    ) -> Result<Option<StoredQuantized>> {
        if !self.contains(&format!("{prefix}.scales")) {
            return Ok(None);
        }
        let q = self.quant.for_layer(prefix)?;
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
        Ok(Some(StoredQuantized {
            weight: self.take(&format!("{prefix}.weight"), &shape.with_cols(packed))?,
            scales: self.take(&format!("{prefix}.scales"), &groups)?,
            biases: self.take(&format!("{prefix}.biases"), &groups)?,
            q,
        }))
    }
}
