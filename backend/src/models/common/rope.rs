//! Rotary position embeddings: default, linear and llama3 scaling, as mlx-lm's `initialize_rope`.

use mlx_rs::{fast, Array};
use serde_json::Value;

use crate::error::{Error, Result};

pub struct Rope {
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    /// Precomputed frequencies (llama3 scaling); replaces `base`.
    freqs: Option<Array>,
}

impl Rope {
    /// From `rope_theta` and the `rope_scaling` object of config.json.
    pub fn new(dims: i32, base: f32, traditional: bool, scaling: Option<&Value>) -> Result<Rope> {
        let rope_type = scaling
            .and_then(|s| s.get("type").or_else(|| s.get("rope_type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let factor = || {
            scaling
                .and_then(|s| s.get("factor"))
                .and_then(Value::as_f64)
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "rope_scaling of type {rope_type} needs a factor above 0"
                    ))
                })
        };
        let plain = |scale| Rope {
            dims,
            traditional,
            base: Some(base),
            scale,
            freqs: None,
        };
        match rope_type {
            "default" => Ok(plain(1.0)),
            "linear" => Ok(plain(1.0 / factor()? as f32)),
            "llama3" => Ok(Rope {
                dims,
                traditional,
                base: None,
                scale: 1.0,
                freqs: Some(llama3_freqs(
                    dims,
                    base,
                    factor()?,
                    scaling.unwrap_or(&Value::Null),
                )?),
            }),
            other => Err(Error::Config(format!(
                "rope_scaling type `{other}` is not supported"
            ))),
        }
    }

    /// Rotates `x` ([B, heads, L, head_dim]) for positions starting at `offset`.
    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        Ok(fast::rope(
            x,
            self.dims,
            self.traditional,
            self.base,
            self.scale,
            offset,
            self.freqs.as_ref(),
        )?)
    }
}

impl Rope {
    /// Rotates each row b of `x` ([B, heads, L, head_dim]) from its own `offsets[b]`, in one
    /// op: per element the same arithmetic as `forward` on the row alone.
    pub fn forward_rows(&self, x: &Array, offsets: &[i32]) -> Result<Array> {
        let offsets = Array::from_slice(offsets, &[offsets.len() as i32]);
        Ok(fast::rope_dynamic(
            x,
            self.dims,
            self.traditional,
            self.base,
            self.scale,
            &offsets,
            self.freqs.as_ref(),
        )?)
    }
}

/// mlx-lm's `Llama3RoPE` frequencies, computed with the same MLX ops in f32.
fn llama3_freqs(dims: i32, base: f32, factor: f64, cfg: &Value) -> Result<Array> {
    use mlx_rs::ops::{arange, gt, logical_and, lt, power, select};
    let get = |k: &str, d: f64| cfg.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
    let (factor, low, high) = (
        factor as f32,
        get("low_freq_factor", 1.0),
        get("high_freq_factor", 4.0),
    );
    let old_len = get("original_max_position_embeddings", 8192.0);
    if !(low > 0.0 && high > low && old_len > 0.0 && high.is_finite() && old_len.is_finite()) {
        return Err(Error::Config(format!(
            "llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and \
             original_max_position_embeddings above 0 (got {low}, {high}, {old_len})"
        )));
    }
    let (low_wavelen, high_wavelen) = (old_len / low, old_len / high);

    let exponents =
        arange::<_, f32>(0.0, dims as f32, 2.0)?.divide(Array::from_f32(dims as f32))?;
    let freqs = power(Array::from_f32(base), &exponents)?;
    let wavelens = freqs.multiply(Array::from_f32(2.0 * std::f32::consts::PI))?;
    let freqs = select(
        &gt(&wavelens, Array::from_f32(low_wavelen))?,
        freqs.multiply(Array::from_f32(factor))?,
        &freqs,
    )?;
    let is_medium = logical_and(
        gt(&wavelens, Array::from_f32(high_wavelen))?,
        lt(&wavelens, Array::from_f32(low_wavelen))?,
    )?;
    let smooth = Array::from_f32(old_len)
        .divide(&wavelens)?
        .subtract(Array::from_f32(low))?
        .divide(Array::from_f32(high - low))?;
    let denom = Array::from_f32(1.0)
        .subtract(&smooth)?
        .divide(Array::from_f32(factor))?
        .add(&smooth)?;
    let smooth_freqs = freqs.divide(&denom)?;
    Ok(select(&is_medium, &smooth_freqs, &freqs)?)
}
