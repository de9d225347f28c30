//! Linear, embedding and norm layers, dense or MLX-quantized (any of MLX's modes).

use mlx_rs::nn::silu;
use mlx_rs::ops::{addmm, matmul};
use mlx_rs::{fast, Array, Dtype};

use super::shape::NormKind;
use crate::error::Result;
use crate::lora::{LowRank, Merge};
use crate::weights::{Cut, MatrixWeight, Packed, QuantizedMatrix, Shape, Weights};

/// `y = x W^T + b`, as mlx's `nn.Linear` or `nn.QuantizedLinear`.
pub enum Linear {
    Dense {
        weight: Array,
        bias: Option<Array>,
    },
    /// As stored, for MLX's kernels in the checkpoint's mode (boxed: the enum stays small).
    Quantized {
        matrix: Box<QuantizedMatrix>,
        bias: Option<Array>,
    },
    Packed {
        packed: Packed,
        bias: Option<Array>,
    },
    /// A layer with a LoRA update added at run time (never fused kernels, nor the one-node
    /// layer: those take packed weights alone).
    Adapted {
        base: Box<Linear>,
        update: LowRank,
    },
}

impl Linear {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Linear::Dense { weight, bias: None } => matmul(x, weight.t())?,
            Linear::Dense {
                weight,
                bias: Some(b),
            } => addmm(b, x, weight.t(), None, None)?,
            Linear::Quantized { matrix, bias } => {
                let y = matrix.matmul(x, true)?;
                match bias {
                    Some(b) => y.add(b)?,
                    None => y,
                }
            }
            Linear::Packed { packed, bias } => {
                let y = packed.matmul(x)?;
                match bias {
                    Some(b) => y.add(b)?,
                    None => y,
                }
            }
            Linear::Adapted { base, update } => update.add_to(x, base.forward(x)?)?,
        })
    }

    /// `x W_i^T (+ b_i)` for each layer: one node when all are packed in one format (a
    /// layer's q/k/v), with the bits of each alone.
    pub fn forward_all(layers: &[&Linear], x: &Array) -> Result<Vec<Array>> {
        let Some((weights, format)) = packed_alike(layers) else {
            return layers.iter().map(|l| l.forward(x)).collect();
        };
        let outs = quant_cpu::quantized_matmuls(x, &weights, format)?;
        outs.into_iter()
            .zip(layers)
            .map(|(y, layer)| match layer.bias() {
                Some(b) => Ok(y.add(b)?),
                None => Ok(y),
            })
            .collect()
    }

    /// `silu(x G^T) * (x U^T)` (the MLP before its down projection): one node when both are
    /// packed in one format without biases, with the bits of the ops it replaces.
    pub fn swiglu(gate: &Linear, up: &Linear, x: &Array) -> Result<Array> {
        match packed_alike(&[gate, up]) {
            Some((w, format)) if gate.bias().is_none() && up.bias().is_none() => {
                Ok(quant_cpu::swiglu_quantized_matmul(x, w[0], w[1], format)?)
            }
            _ => Ok(silu(gate.forward(x)?)?.multiply(up.forward(x)?)?),
        }
    }

    /// The layer's own bias (`y = x W^T + b`), if it has one.
    pub fn bias(&self) -> Option<&Array> {
        match self {
            Linear::Dense { bias, .. }
            | Linear::Quantized { bias, .. }
            | Linear::Packed { bias, .. } => bias.as_ref(),
            Linear::Adapted { base, .. } => base.bias(),
        }
    }

    /// The arrays to evaluate at load time.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Linear::Dense { weight, bias } => [Some(weight), bias.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
            Linear::Quantized { matrix, bias } => {
                let mut arrays = matrix.arrays();
                arrays.extend(bias.as_ref());
                arrays
            }
            Linear::Packed { packed, bias } => {
                let mut arrays = packed.arrays();
                arrays.extend(bias.as_ref());
                arrays
            }
            Linear::Adapted { base, update } => {
                let mut arrays = base.arrays();
                arrays.extend(update.arrays());
                arrays
            }
        }
    }
}

/// The packed weights of `layers` and their one format (its mode included), when every layer
/// is packed in it.
pub(super) fn packed_alike<'a>(
    layers: &[&'a Linear],
) -> Option<(Vec<quant_cpu::QuantWeight<'a>>, quant_cpu::Format)> {
    let mut format = None;
    let mut weights = Vec::with_capacity(layers.len());
    for layer in layers {
        let Linear::Packed { packed, .. } = layer else {
            return None;
        };
        if format.is_some_and(|f| f != packed.format) {
            return None;
        }
        format = Some(packed.format);
        weights.push(packed.operand());
    }
    Some((weights, format?))
}

/// A token embedding table, usable as the output projection when tied.
pub enum Embedding {
    Dense { weight: Array },
    Quantized(QuantizedMatrix),
    Packed(Packed),
}

impl Embedding {
    /// Rows for `ids`; quantized rows are dequantized when looked up.
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Dense { weight } => weight.take_axis(ids, 0)?,
            Embedding::Quantized(matrix) => matrix.rows(ids)?,
            Embedding::Packed(packed) => packed.rows(ids)?,
        })
    }

    /// `x E^T`: the tied output projection.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Dense { weight } => matmul(x, weight.t())?,
            Embedding::Quantized(matrix) => matrix.matmul(x, true)?,
            Embedding::Packed(packed) => packed.matmul(x)?,
        })
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Embedding::Dense { weight } => vec![weight],
            Embedding::Quantized(matrix) => matrix.arrays(),
            Embedding::Packed(packed) => packed.arrays(),
        }
    }
}

/// Root-mean-square norm with a learned scale.
pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        if cpu_f32(x) && self.weight.dtype() == Dtype::Float32 {
            return Ok(quant_cpu::fast::rms_norm(x, &self.weight, self.eps)?);
        }
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }
}

/// Whether `x` takes `quant_cpu::fast`'s one-node CPU ops (the bits of MLX's CPU fallbacks):
/// f32 on the CPU. Metal keeps MLX's own fused kernels.
pub fn cpu_f32(x: &Array) -> bool {
    !cfg!(target_os = "macos") && x.dtype() == Dtype::Float32
}

impl Linear {
    /// A linear layer `in_dim -> out_dim` at `prefix`, with an optional bias.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        in_dim: i32,
        out_dim: i32,
        bias: bool,
    ) -> Result<Linear> {
        Linear::load_split(w, prefix, in_dim, out_dim, bias, Cut::Whole)
    }

    /// A linear layer cut for tensor parallelism (`split`; see [`Weights::bias`] for its bias).
    pub fn load_split(
        w: &mut Weights,
        prefix: &str,
        in_dim: i32,
        out_dim: i32,
        bias: bool,
        split: Cut,
    ) -> Result<Linear> {
        let weight = w.matrix(prefix, Shape::matrix(out_dim, in_dim), split)?;
        let bias = match bias {
            true => w.bias(prefix, out_dim, split)?,
            false => None,
        };
        let linear = Linear::of(weight, bias);
        match w.low_rank(prefix, in_dim, out_dim, split)? {
            None => Ok(linear),
            Some(update) => linear.adapt(update, w.merge()),
        }
    }

    /// The layer with its LoRA `update`: fused into a dense weight unless `merge` says run
    /// time; a quantized weight takes it at run time.
    fn adapt(self, update: LowRank, merge: Merge) -> Result<Linear> {
        Ok(match (self, merge) {
            (Linear::Dense { weight, bias }, Merge::Fuse) => Linear::Dense {
                weight: update.fuse_into(&weight)?,
                bias,
            },
            (base, _) => Linear::Adapted {
                base: Box::new(base),
                update,
            },
        })
    }

    fn of(weight: MatrixWeight, bias: Option<Array>) -> Linear {
        match weight {
            MatrixWeight::Dense(weight) => Linear::Dense { weight, bias },
            MatrixWeight::Packed(packed) => Linear::Packed { packed, bias },
            MatrixWeight::Quantized(matrix) => Linear::Quantized {
                matrix: Box::new(matrix),
                bias,
            },
        }
    }
}

impl Embedding {
    /// An embedding table of `vocab` rows of `dim` at `prefix`.
    pub fn load(w: &mut Weights, prefix: &str, vocab: i32, dim: i32) -> Result<Embedding> {
        Ok(
            match w.matrix(prefix, Shape::matrix(vocab, dim), Cut::Whole)? {
                MatrixWeight::Dense(weight) => Embedding::Dense { weight },
                MatrixWeight::Packed(packed) => Embedding::Packed(packed),
                MatrixWeight::Quantized(matrix) => Embedding::Quantized(matrix),
            },
        )
    }
}

impl RmsNorm {
    /// An RMS norm of width `dim` at `prefix`.
    pub fn load(w: &mut Weights, prefix: &str, dim: i32, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: w.take_float(&format!("{prefix}.weight"), &[dim])?,
            eps,
        })
    }

    /// An RMS norm of `kind`: Gemma's scales by `1 + w`, added once here in the weight's
    /// dtype (the same bits as mlx-lm adding it at every call).
    pub fn load_kind(
        w: &mut Weights,
        prefix: &str,
        (dim, eps): (i32, f32),
        kind: NormKind,
    ) -> Result<RmsNorm> {
        let norm = RmsNorm::load(w, prefix, dim, eps)?;
        match kind {
            NormKind::Rms => Ok(norm),
            NormKind::RmsPlusOne => {
                let one = Array::from_f32(1.0).as_dtype(norm.weight.dtype())?;
                Ok(RmsNorm {
                    weight: one.add(&norm.weight)?,
                    eps,
                })
            }
            NormKind::LayerNorm => Err(crate::error::Error::Config(format!(
                "{prefix}: norm kind LayerNorm is not implemented yet"
            ))),
        }
    }
}

/// `gelu_approx(gate) * up` (GeGLU with tanh, Gemma's MLP), op for op as mlx's
/// `nn.gelu_approx`: `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`.
pub fn geglu_tanh(gate: &Array, up: &Array) -> Result<Array> {
    let x = gate;
    let scalar = |v: f64| Array::from_f32(v as f32).as_dtype(x.dtype());
    let cube = x.power(scalar(3.0)?)?;
    let inner = x.add(scalar(0.044715)?.multiply(&cube)?)?;
    let tanh = mlx_rs::ops::tanh(&scalar((2.0 / std::f64::consts::PI).sqrt())?.multiply(&inner)?)?;
    let gelu = scalar(0.5)?
        .multiply(x)?
        .multiply(scalar(1.0)?.add(&tanh)?)?;
    Ok(gelu.multiply(up)?)
}

/// gpt-oss's clamped SwiGLU, op for op as mlx-lm's `swiglu_oai` (alpha 1.702, limit 7):
/// `(clip(up, -7, 7) + 1) * (g * sigmoid(1.702 * g))` with `g = minimum(gate, 7)`.
pub fn clamped_swiglu(gate: &Array, up: &Array) -> Result<Array> {
    const ALPHA: f32 = 1.702;
    const LIMIT: f32 = 7.0;
    let scalar = |v: f32| Array::from_f32(v).as_dtype(gate.dtype());
    let g = mlx_rs::ops::minimum(gate, scalar(LIMIT)?)?;
    let x = mlx_rs::ops::clip(up, (scalar(-LIMIT)?, scalar(LIMIT)?))?;
    let glu = g.multiply(mlx_rs::ops::sigmoid(&scalar(ALPHA)?.multiply(&g)?)?)?;
    Ok(x.add(scalar(1.0)?)?.multiply(&glu)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate clamped from above only, the linear part both ways, plus one.
    #[test]
    fn clamped_swiglu_clamps_as_swiglu_oai() -> Result<()> {
        let gate = Array::from_slice(&[10.0f32, -10.0, 1.0, 7.0], &[4]);
        let up = Array::from_slice(&[-9.0f32, 9.0, 0.5, 0.0], &[4]);
        let out = clamped_swiglu(&gate, &up)?;
        out.eval()?;
        let glu = |g: f32| g * (1.0 / (1.0 + (-1.702 * g).exp()));
        let want = [-6.0 * glu(7.0), 8.0 * glu(-10.0), 1.5 * glu(1.0), glu(7.0)];
        for (got, want) in out.as_slice::<f32>().iter().zip(want) {
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{got} vs {want}"
            );
        }
        Ok(())
    }
}
