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

/// A quantized matrix kept as stored for `quant-cpu`'s kernels: packed codes, scales and
/// biases in their stored dtype (f32, bf16 or f16).
pub struct Packed {
    pub weight: Array,
    pub scales: Array,
    pub biases: Array,
    pub format: quant_cpu::Format,
}

impl Packed {
    /// `x W^T` without a dequantized copy of W.
    fn matmul(&self, x: &Array) -> Result<Array> {
        let Packed {
            weight,
            scales,
            biases,
            format,
        } = self;
        Ok(quant_cpu::quantized_matmul(
            x, weight, scales, biases, *format,
        )?)
    }

    /// Rows `ids` of W, dequantized in f32 (an embedding lookup).
    fn rows(&self, ids: &Array) -> Result<Array> {
        let f32 = mlx_rs::Dtype::Float32;
        Ok(dequantize(
            self.weight.take_axis(ids, 0)?,
            self.scales.take_axis(ids, 0)?.as_dtype(f32)?,
            &self.biases.take_axis(ids, 0)?.as_dtype(f32)?,
            self.format.group as i32,
            self.format.bits as i32,
        )?)
    }

    fn arrays(&self) -> Vec<&Array> {
        vec![&self.weight, &self.scales, &self.biases]
    }
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
    Packed {
        packed: Packed,
        bias: Option<Array>,
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
            Linear::Packed { packed, bias } => {
                let y = packed.matmul(x)?;
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
            Linear::Packed { packed, bias } => {
                let mut arrays = packed.arrays();
                arrays.extend(bias.as_ref());
                arrays
            }
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
    Packed(Packed),
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
            Embedding::Packed(packed) => packed.rows(ids)?,
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
            Embedding::Packed(packed) => packed.matmul(x)?,
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
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }
}
