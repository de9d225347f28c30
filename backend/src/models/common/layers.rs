//! Linear, embedding and norm layers, dense or MLX affine-quantized.

use mlx_rs::ops::{addmm, dequantize, matmul, quantized_matmul};
use mlx_rs::{fast, Array};

use crate::error::Result;

/// Group size and bits of an MLX affine-quantized matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    pub group_size: i32,
    pub bits: i32,
}

/// `y = x W^T + b`, as mlx's `nn.Linear` or `nn.QuantizedLinear`.
pub enum Linear {
    Dense {
        weight: Array,
        bias: Option<Array>,
    },
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        bias: Option<Array>,
        q: QuantParams,
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
            Linear::Quantized {
                weight,
                scales,
                biases,
                bias,
                q,
            } => {
                let y = quantized_matmul(x, weight, scales, biases, true, q.group_size, q.bits)?;
                match bias {
                    Some(b) => y.add(b)?,
                    None => y,
                }
            }
        })
    }

    /// The arrays to evaluate at load time.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Linear::Dense { weight, bias } => [Some(weight), bias.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
            Linear::Quantized {
                weight,
                scales,
                biases,
                bias,
                ..
            } => [Some(weight), Some(scales), Some(biases), bias.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
        }
    }
}

/// A token embedding table, usable as the output projection when tied.
pub enum Embedding {
    Dense {
        weight: Array,
    },
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        q: QuantParams,
    },
}

impl Embedding {
    /// Rows for `ids`; quantized rows are dequantized when looked up.
    pub fn forward(&self, ids: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Dense { weight } => weight.take_axis(ids, 0)?,
            Embedding::Quantized {
                weight,
                scales,
                biases,
                q,
            } => dequantize(
                weight.take_axis(ids, 0)?,
                scales.take_axis(ids, 0)?,
                &biases.take_axis(ids, 0)?,
                q.group_size,
                q.bits,
            )?,
        })
    }

    /// `x E^T`: the tied output projection.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Embedding::Dense { weight } => matmul(x, weight.t())?,
            Embedding::Quantized {
                weight,
                scales,
                biases,
                q,
            } => quantized_matmul(x, weight, scales, biases, true, q.group_size, q.bits)?,
        })
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Embedding::Dense { weight } => vec![weight],
            Embedding::Quantized {
                weight,
                scales,
                biases,
                ..
            } => vec![weight, scales, biases],
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
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }
}
