//! The weight modes: how stored weights become the arrays the model computes with.

use mlx_rs::{Array, Dtype};

use super::quant::{QuantParams, StoredQuantized};
use super::Weights;
use crate::error::{Error, Result};

/// How stored weights become the arrays the model computes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WeightMode {
    /// The checkpoint's dtypes and MLX's quantized kernels: numerically what mlx-lm does.
    AsStored,
    /// Dequantize (as `mlx_lm convert --dequantize` does) and compute in f32: fast on CPU,
    /// where MLX's quantized kernels are scalar code and float matmuls use BLAS.
    DequantizeF32,
    /// The f32 numerics of `DequantizeF32`, but quantized matrices stay packed as stored
    /// (scales and biases widened to f32) and multiply through `quant-cpu`'s kernels: the
    /// memory and bytes per token of the checkpoint. CPU only.
    PackedF32,
}

impl WeightMode {
    /// The default for the device MLX computes on, which is also what `dequantize:false`
    /// means: the checkpoint's own quantized kernels on Metal, `quant-cpu`'s packed kernels on
    /// the CPU (the f32 numerics at the checkpoint's memory). `dequantize:true` asks for
    /// `DequantizeF32`.
    pub fn default_for_device() -> WeightMode {
        if cfg!(target_os = "macos") {
            WeightMode::AsStored
        } else {
            WeightMode::PackedF32
        }
    }
}

/// A matrix as the weight mode computes with it.
pub enum MatrixWeight {
    Dense(Array),
    Packed(Packed),
    Quantized {
        weight: Array,
        scales: Array,
        biases: Array,
        q: QuantParams,
    },
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
    pub fn matmul(&self, x: &Array) -> Result<Array> {
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
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let f32 = mlx_rs::Dtype::Float32;
        Ok(mlx_rs::ops::dequantize(
            self.weight.take_axis(ids, 0)?,
            self.scales.take_axis(ids, 0)?.as_dtype(f32)?,
            &self.biases.take_axis(ids, 0)?.as_dtype(f32)?,
            self.format.group as i32,
            self.format.bits as i32,
        )?)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        vec![&self.weight, &self.scales, &self.biases]
    }
}

impl Weights {
    /// `array` in the mode's compute dtype: f32 unless the mode keeps the stored one.
    pub(super) fn to_compute_dtype(&self, array: Array) -> Result<Array> {
        match self.mode {
            WeightMode::DequantizeF32 | WeightMode::PackedF32
                if array.dtype() != Dtype::Float32 =>
            {
                Ok(array.as_dtype(Dtype::Float32)?)
            }
            _ => Ok(array),
        }
    }

    /// A quantized matrix as the mode computes with it: as stored, packed, or dequantized.
    pub(super) fn quantized_for_mode(
        &mut self,
        prefix: &str,
        stored: StoredQuantized,
    ) -> Result<MatrixWeight> {
        let f32_params = |a: &Array| a.as_dtype(Dtype::Float32);
        match self.mode {
            WeightMode::AsStored => Ok(MatrixWeight::Quantized {
                weight: stored.weight,
                scales: stored.scales,
                biases: stored.biases,
                q: stored.q,
            }),
            WeightMode::PackedF32 => self.packed(prefix, stored),
            // As `mlx_lm convert --dequantize --dtype float32`: scales and biases in f32 first.
            WeightMode::DequantizeF32 => Ok(MatrixWeight::Dense(mlx_rs::ops::dequantize(
                &stored.weight,
                &f32_params(&stored.scales)?,
                &f32_params(&stored.biases)?,
                stored.q.group_size,
                stored.q.bits,
            )?)),
        }
    }

    /// A matrix kept packed for `quant-cpu`, scales and biases as stored (the kernels widen
    /// bf16 and f16 to f32 exactly, so the numerics are those of f32 scales).
    fn packed(&mut self, prefix: &str, stored: StoredQuantized) -> Result<MatrixWeight> {
        let StoredQuantized {
            weight,
            scales,
            biases,
            q,
        } = stored;
        let format = quant_cpu::Format::new(q.bits as u32, q.group_size as usize)
            .map_err(|e| Error::Weights(format!("`{prefix}`: {e}")))?;
        if !quant_cpu::kernel::vectorized(format) {
            // Never a silent slow path: the log and Status say which layers.
            tracing::warn!(
                layer = prefix,
                bits = format.bits,
                group = format.group,
                "no vector kernel for this format on this CPU: the portable one runs"
            );
            self.portable.push(prefix.to_string());
        }
        let kept = [Dtype::Float32, Dtype::Bfloat16, Dtype::Float16];
        let (scales, biases) =
            match kept.contains(&scales.dtype()) && biases.dtype() == scales.dtype() {
                true => (scales, biases),
                false => (
                    scales.as_dtype(Dtype::Float32)?,
                    biases.as_dtype(Dtype::Float32)?,
                ),
            };
        Ok(MatrixWeight::Packed(Packed {
            weight,
            scales,
            biases,
            format,
        }))
    }
}
