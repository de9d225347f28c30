//! Rotary position embeddings: default, linear and llama3 scaling, as mlx-lm's `initialize_rope`.

use mlx_rs::{fast, Array, Dtype};
use serde_json::Value;

use super::layers::cpu_f32;
use super::shape::{RopePairs, RopeScaling, RopeShape};
use crate::error::{Error, Result};

#[derive(Clone)]
pub struct Rope {
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    /// Precomputed frequencies (llama3 and YaRN scaling); replaces `base`.
    freqs: Option<Array>,
    /// YaRN's attention factor, applied to the rotated input (1 for every other kind).
    mscale: f32,
}

impl Rope {
    /// A rope of `shape` (its scaling's numbers from the `rope_scaling` object of config.json)
    /// over `dims`, from base `rope_theta`.
    pub fn new(dims: i32, base: f32, shape: &RopeShape, scaling: Option<&Value>) -> Result<Rope> {
        let traditional = shape.pairs == RopePairs::Adjacent;
        let params = scaling.unwrap_or(&Value::Null);
        let factor = || {
            scaling
                .and_then(|s| s.get("factor"))
                .and_then(Value::as_f64)
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "rope_scaling of type {:?} needs a factor above 0",
                        shape.scaling
                    ))
                })
        };
        let plain = |scale| Rope {
            dims,
            traditional,
            base: Some(base),
            scale,
            freqs: None,
            mscale: 1.0,
        };
        let with_freqs = |freqs, mscale| Rope {
            dims,
            traditional,
            base: None,
            scale: 1.0,
            freqs: Some(freqs),
            mscale,
        };
        match shape.scaling {
            RopeScaling::None => Ok(plain(1.0)),
            RopeScaling::Linear => Ok(plain(1.0 / factor()? as f32)),
            RopeScaling::Llama3 => Ok(with_freqs(
                llama3_freqs(dims, base, factor()?, params)?,
                1.0,
            )),
            RopeScaling::Yarn => {
                let yarn = Yarn::new(factor()?, params)?;
                Ok(with_freqs(yarn.freqs(dims, base)?, yarn.input_mscale()))
            }
        }
    }

    /// Rotates `x` ([B, heads, L, head_dim]) for positions starting at `offset`.
    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        let x = self.scaled(x)?;
        if let Some(spec) = self.cpu_spec(&x) {
            return Ok(quant_cpu::fast::rope(&x, &Array::from_int(offset), &spec)?);
        }
        Ok(fast::rope(
            &x,
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
        let x = self.scaled(x)?;
        if let Some(spec) = self.cpu_spec(&x) {
            return Ok(quant_cpu::fast::rope(&x, &offsets, &spec)?);
        }
        Ok(fast::rope_dynamic(
            &x,
            self.dims,
            self.traditional,
            self.base,
            self.scale,
            &offsets,
            self.freqs.as_ref(),
        )?)
    }
}

impl Rope {
    /// The one-node CPU rope for `x` when it takes one (f32 [B, heads, L, D] on the CPU).
    fn cpu_spec(&self, x: &Array) -> Option<quant_cpu::fast::RopeSpec<'_>> {
        (cpu_f32(x) && x.ndim() == 4).then(|| self.spec_f32())?
    }

    /// How the one-node decode layer rotates (`quant_cpu::layer`), where it can: frequencies
    /// in f32 and no YaRN input scale (the node does not scale its input).
    pub fn layer_spec(&self) -> Option<quant_cpu::fast::RopeSpec<'_>> {
        self.spec_f32().filter(|_| self.mscale == 1.0)
    }

    /// This rope as the CPU nodes take it, when its frequencies (if any) are f32.
    fn spec_f32(&self) -> Option<quant_cpu::fast::RopeSpec<'_>> {
        let freqs_f32 = self
            .freqs
            .as_ref()
            .is_none_or(|f| f.dtype() == Dtype::Float32);
        freqs_f32.then_some(quant_cpu::fast::RopeSpec {
            dims: self.dims,
            traditional: self.traditional,
            base: self.base.unwrap_or(1.0),
            freqs: self.freqs.as_ref(),
            scale: self.scale,
        })
    }

    /// The input times YaRN's attention factor, as mlx-lm scales it before rotating (the
    /// rotated dims are the whole of what our families pass in).
    fn scaled(&self, x: &Array) -> Result<Array> {
        match self.mscale == 1.0 {
            true => Ok(x.clone()),
            false => Ok(x.multiply(Array::from_f32(self.mscale).as_dtype(x.dtype())?)?),
        }
    }

    /// Rotates `x` ([B, heads, L, head_dim]) for each row's cache: one offset for one row,
    /// per-row offsets for a decode batch.
    pub fn for_rows(&self, x: &Array, offsets: &[i32]) -> Result<Array> {
        match offsets {
            [offset] => self.forward(x, *offset),
            rows => self.forward_rows(x, rows),
        }
    }
}

impl Rope {
    /// Whether it scales its input (YaRN's attention factor): over the whole head, which is
    /// mlx-lm's only where the rope rotates the whole head.
    pub fn scales_input(&self) -> bool {
        self.mscale != 1.0
    }
}

/// YaRN scaling (DeepSeek-V2/V3), as mlx-lm's `YarnRoPE`.
struct Yarn {
    factor: f64,
    original_len: f64,
    beta_fast: f64,
    beta_slow: f64,
    mscale: f64,
    mscale_all_dim: f64,
}

impl Yarn {
    fn new(factor: f64, cfg: &Value) -> Result<Yarn> {
        let get = |k: &str, d: f64| cfg.get(k).and_then(Value::as_f64).unwrap_or(d);
        let yarn = Yarn {
            factor,
            original_len: get("original_max_position_embeddings", 4096.0),
            beta_fast: get("beta_fast", 32.0),
            beta_slow: get("beta_slow", 1.0),
            mscale: get("mscale", 1.0),
            mscale_all_dim: get("mscale_all_dim", 0.0),
        };
        let sane = [yarn.original_len, yarn.beta_fast, yarn.beta_slow]
            .iter()
            .all(|v| v.is_finite() && *v > 0.0);
        match sane && yarn.mscale.is_finite() && yarn.mscale_all_dim.is_finite() {
            true => Ok(yarn),
            false => Err(Error::Config(format!(
                "yarn rope_scaling needs original_max_position_embeddings, beta_fast and \
                 beta_slow above 0 and finite mscales (got {}, {}, {}, {}, {})",
                yarn.original_len, yarn.beta_fast, yarn.beta_slow, yarn.mscale, yarn.mscale_all_dim
            ))),
        }
    }

    /// `0.1 * m * ln(factor) + 1` above a factor of 1.
    pub fn attention_factor(factor: f64, m: f64) -> f64 {
        match factor <= 1.0 {
            true => 1.0,
            false => 0.1 * m * factor.ln() + 1.0,
        }
    }

    fn input_mscale(&self) -> f32 {
        (Yarn::attention_factor(self.factor, self.mscale)
            / Yarn::attention_factor(self.factor, self.mscale_all_dim)) as f32
    }

    /// The correction range's ends, as mlx-lm rounds them.
    fn correction_range(&self, dims: i32, base: f32) -> (f64, f64) {
        let dims_f = f64::from(dims);
        let dim = |rotations: f64| {
            dims_f * (self.original_len / (rotations * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * f64::from(base).ln())
        };
        let low = dim(self.beta_fast).floor().max(0.0);
        let high = dim(self.beta_slow).ceil().min(dims_f - 1.0);
        (low, high)
    }

    /// The interpolated frequencies, computed with the same MLX ops in f32 as mlx-lm.
    fn freqs(&self, dims: i32, base: f32) -> Result<Array> {
        use mlx_rs::ops::{arange, clip, power};
        let (low, mut high) = self.correction_range(dims, base);
        if low == high {
            high += 0.001;
        }
        let exponents =
            arange::<_, f32>(0.0, dims as f32, 2.0)?.divide(Array::from_f32(dims as f32))?;
        let freq_extra = power(Array::from_f32(base), &exponents)?;
        let freq_inter = Array::from_f32(self.factor as f32).multiply(&freq_extra)?;
        let ramp = arange::<_, f32>(0.0, (dims / 2) as f32, 1.0)?
            .subtract(Array::from_f32(low as f32))?
            .divide(Array::from_f32((high - low) as f32))?;
        let ramp = clip(&ramp, (Array::from_f32(0.0), Array::from_f32(1.0)))?;
        let mask = Array::from_f32(1.0).subtract(&ramp)?;
        let numerator = freq_inter.multiply(&freq_extra)?;
        let denominator = freq_inter
            .multiply(&mask)?
            .add(freq_extra.multiply(Array::from_f32(1.0).subtract(&mask)?)?)?;
        Ok(numerator.divide(&denominator)?)
    }
}

/// YaRN's attention factor for a softmax scale (DeepSeek's `mscale_all_dim` correction).
pub fn yarn_attention_factor(factor: f64, m: f64) -> f64 {
    Yarn::attention_factor(factor, m)
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
