//! The weight modes: how stored weights become the arrays the model computes with.

use mlx_rs::{Array, Dtype};

use super::quant::{QuantMode, QuantParams, QuantizedMatrix};
use super::Weights;
use crate::error::{Error, Result};
use quant_cpu::kernel::int8::tiles;
pub use quant_cpu::kernel::Numerics;
use quant_cpu::Layout;

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
    /// `PackedF32` with activations quantized to int8 for the products of few rows (decode
    /// steps) where the format has an integer kernel (`cpu_numerics:int8`). CPU only.
    PackedInt8,
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

    /// This mode with packed weights multiplied in `numerics`; the other modes are left as
    /// they are.
    pub fn with_numerics(self, numerics: Numerics) -> WeightMode {
        match (self, numerics) {
            (WeightMode::PackedF32 | WeightMode::PackedInt8, Numerics::Exact) => {
                WeightMode::PackedF32
            }
            (WeightMode::PackedF32 | WeightMode::PackedInt8, Numerics::Int8) => {
                WeightMode::PackedInt8
            }
            (mode, _) => mode,
        }
    }

    /// The numerics the mode computes with: `Int8` for `PackedInt8` (its products, and its
    /// prefill attention), `Exact` for the rest.
    pub fn numerics(self) -> Numerics {
        match self {
            WeightMode::PackedInt8 => Numerics::Int8,
            _ => Numerics::Exact,
        }
    }
}

/// A matrix as the weight mode computes with it.
pub enum MatrixWeight {
    Dense(Array),
    Packed(Packed),
    /// As stored, for MLX's own kernels in the checkpoint's mode.
    Quantized(QuantizedMatrix),
}

impl QuantizedMatrix {
    /// `x W^T` (`transpose`) or `x W` through MLX's `quantized_matmul` in the matrix's mode.
    pub fn matmul(&self, x: &Array, transpose: bool) -> Result<Array> {
        let QuantParams {
            group_size,
            bits,
            mode,
        } = self.q;
        Ok(mlx_rs::ops::quantized_matmul_mode(
            x,
            &self.weight,
            &self.scales,
            self.biases.as_ref(),
            transpose,
            group_size,
            bits,
            mode.name(),
        )?)
    }

    /// Rows `ids` of W dequantized, as mlx's `QuantizedEmbedding` looks them up (bf16 for the
    /// float modes, whose uint8 scales carry no dtype).
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let biases = self
            .biases
            .as_ref()
            .map(|b| b.take_axis(ids, 0))
            .transpose()?;
        Ok(mlx_rs::ops::dequantize_mode(
            self.weight.take_axis(ids, 0)?,
            self.scales.take_axis(ids, 0)?,
            biases.as_ref(),
            self.q.group_size,
            self.q.bits,
            self.q.mode.name(),
        )?)
    }

    /// Row r of `rows` ([R, 1, in]) through matrix `experts[r]` of the stack, with MLX's
    /// `gather_qmm` in the matrix's mode (what mlx-lm's `QuantizedSwitchLinear` runs).
    pub fn gather(&self, rows: &Array, experts: &Array, sorted: bool) -> Result<Array> {
        Ok(mlx_rs::ops::gather_qmm_mode(
            rows,
            &self.weight,
            &self.scales,
            self.biases.as_ref(),
            None,
            experts,
            true,
            self.q.group_size,
            self.q.bits,
            sorted,
            self.q.mode.name(),
        )?)
    }

    /// W in f32, as `mlx_lm convert --dequantize --dtype float32` makes it: affine's scales
    /// and biases in f32 first; a float mode's bf16 result (exact: an FP4 or FP8 code times a
    /// power of two or an E4M3 scale needs at most 6 significant bits) widened.
    pub fn dequantize_f32(&self) -> Result<Array> {
        let f32 = |a: &Array| a.as_dtype(Dtype::Float32);
        let w = match (self.q.mode, &self.biases) {
            (QuantMode::Affine, Some(b)) => mlx_rs::ops::dequantize(
                &self.weight,
                &f32(&self.scales)?,
                &f32(b)?,
                self.q.group_size,
                self.q.bits,
            )?,
            _ => self.rows_all()?,
        };
        Ok(f32(&w)?)
    }

    /// Every row, dequantized in the mode's own dtype.
    fn rows_all(&self) -> Result<Array> {
        Ok(mlx_rs::ops::dequantize_mode(
            &self.weight,
            &self.scales,
            self.biases.as_ref(),
            self.q.group_size,
            self.q.bits,
            self.q.mode.name(),
        )?)
    }

    /// The same reshaping or slicing applied to codes, scales and biases alike (they share
    /// the leading axes).
    pub fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<QuantizedMatrix> {
        Ok(QuantizedMatrix {
            weight: f(&self.weight)?,
            scales: f(&self.scales)?,
            biases: self.biases.as_ref().map(&f).transpose()?,
            q: self.q,
        })
    }

    pub fn arrays(&self) -> Vec<&Array> {
        [Some(&self.weight), Some(&self.scales), self.biases.as_ref()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// A quantized matrix kept as stored for `quant-cpu`'s kernels: packed codes, scales (and an
/// affine matrix's biases) in their stored dtype (f32, bf16 or f16; uint8 for the float modes).
pub struct Packed {
    pub weight: Array,
    pub scales: Array,
    pub biases: Option<Array>,
    pub format: quant_cpu::Format,
}

impl Packed {
    /// `x W^T` without a dequantized copy of W.
    pub fn matmul(&self, x: &Array) -> Result<Array> {
        Ok(quant_cpu::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            self.biases.as_ref(),
            self.format,
        )?)
    }

    /// Rows `ids` of W, dequantized in f32 (an embedding lookup).
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let take = |a: &Array| match self.format.layout {
            Layout::Rows => Ok(a.take_axis(ids, 0)?),
            Layout::Tiles => tiled_rows(a, ids),
        };
        let biases = self.biases.as_ref().map(take).transpose()?;
        dequantize_f32(
            &take(&self.weight)?,
            &take(&self.scales)?,
            biases.as_ref(),
            self.format,
        )
    }

    /// All of W in f32.
    pub fn dequantize_f32(&self) -> Result<Array> {
        let rows = |a: &Array| match self.format.layout {
            Layout::Rows => Ok(a.clone()),
            Layout::Tiles => tiles(a, false),
        };
        let biases = self.biases.as_ref().map(rows).transpose()?;
        dequantize_f32(
            &rows(&self.weight)?,
            &rows(&self.scales)?,
            biases.as_ref(),
            self.format,
        )
    }

    /// The weight as the kernels take it.
    pub fn operand(&self) -> quant_cpu::QuantWeight<'_> {
        quant_cpu::QuantWeight {
            w: &self.weight,
            scales: &self.scales,
            biases: self.biases.as_ref(),
        }
    }

    pub fn arrays(&self) -> Vec<&Array> {
        [Some(&self.weight), Some(&self.scales), self.biases.as_ref()]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// `a` (`[..., N, C]`, N whole tiles) with each tile's `[16, C]` transposed to `[C, 16]`
/// (`into`), or back: the integer path's tiles ([`quant_cpu::kernel::int8::tiles`]) of codes,
/// whose uint32 elements are the tiles' 4-byte words, and of scales and biases.
fn tiles(a: &Array, into: bool) -> Result<Array> {
    let width = TILE as i32;
    let shape = a.shape().to_vec();
    let (lead, n, c) = match shape.as_slice() {
        [lead @ .., n, c] => (lead.to_vec(), *n, *c),
        _ => {
            return Err(Error::Weights(format!(
                "a matrix has two axes, not {shape:?}"
            )))
        }
    };
    let mut split = lead.clone();
    split.extend(match into {
        true => [n / width, width, c],
        false => [n / width, c, width],
    });
    let moved = a.reshape(&split)?.swap_axes(-1, -2)?;
    // A transposed view reshaped is a copy in the new order.
    Ok(moved.reshape(&shape)?)
}

/// `p` in tiles where the integer path reads them here (int8 numerics, AVX-512 VNNI, a format
/// and row count the tiles take), else as it is.
fn in_tiles_where_read(p: Packed) -> Result<Packed> {
    let rows = p
        .weight
        .shape()
        .iter()
        .rev()
        .nth(1)
        .map_or(0, |&n| n as usize);
    let int8 = p.format.numerics == Numerics::Int8;
    if !(int8 && tiles::wanted() && tiles::takes(p.format, rows)) {
        return Ok(p);
    }
    Ok(Packed {
        weight: tiles(&p.weight, true)?,
        scales: tiles(&p.scales, true)?,
        biases: p.biases.as_ref().map(|b| tiles(b, true)).transpose()?,
        format: p.format.with_layout(Layout::Tiles),
    })
}

/// Rows `ids` of a tiled matrix `a` (`[N, C]`): element `c` of row `n` is at
/// `(n / 16) · 16C + 16c + n % 16` of the tiles.
fn tiled_rows(a: &Array, ids: &Array) -> Result<Array> {
    use mlx_rs::ops::{add, arange, expand_dims, floor_divide, multiply, remainder};
    let width = TILE as i32;
    let c = *a.shape().last().unwrap_or(&0);
    let ids = ids.as_dtype(Dtype::Int32)?;
    let tile = multiply(
        floor_divide(&ids, Array::from_int(width))?,
        Array::from_int(width * c),
    )?;
    let base = add(tile, remainder(&ids, Array::from_int(width))?)?;
    let columns = arange::<i32, i32>(0, width * c, width)?;
    let at = add(expand_dims(&base, -1)?, columns)?;
    Ok(a.reshape(&[-1])?.take_axis(&at, 0)?)
}

/// Weight rows a tile holds.
const TILE: usize = quant_cpu::kernel::int8::tiles::WIDTH;

/// Codes dequantized in f32 as mlx-lm's f32 twin holds them: affine's scales and biases in f32
/// first; a float mode's result (exact in bf16) widened.
fn dequantize_f32(
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    format: quant_cpu::Format,
) -> Result<Array> {
    let f32 = Dtype::Float32;
    let (group, bits) = (format.group as i32, format.bits as i32);
    Ok(match biases {
        Some(b) => {
            mlx_rs::ops::dequantize(w, scales.as_dtype(f32)?, &b.as_dtype(f32)?, group, bits)?
        }
        None => mlx_rs::ops::dequantize_mode(w, scales, None, group, bits, format.mode.name())?
            .as_dtype(f32)?,
    })
}

impl Weights {
    /// `array` in the mode's compute dtype: f32 unless the mode keeps the stored one.
    pub(super) fn to_compute_dtype(&self, array: Array) -> Result<Array> {
        match self.mode {
            WeightMode::DequantizeF32 | WeightMode::PackedF32 | WeightMode::PackedInt8
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
        stored: QuantizedMatrix,
    ) -> Result<MatrixWeight> {
        match self.mode {
            WeightMode::AsStored => Ok(MatrixWeight::Quantized(stored)),
            WeightMode::PackedF32 => self.packed(prefix, stored, Numerics::Exact),
            WeightMode::PackedInt8 => self.packed(prefix, stored, Numerics::Int8),
            WeightMode::DequantizeF32 => Ok(MatrixWeight::Dense(stored.dequantize_f32()?)),
        }
    }

    /// A matrix kept packed for `quant-cpu`, scales and biases as stored (the kernels widen
    /// bf16 and f16 to f32 exactly, so the numerics are those of f32 scales; a float mode's
    /// uint8 scales are decoded by the kernels themselves).
    fn packed(
        &mut self,
        prefix: &str,
        stored: QuantizedMatrix,
        numerics: Numerics,
    ) -> Result<MatrixWeight> {
        let QuantizedMatrix {
            weight,
            scales,
            biases,
            q,
        } = stored;
        let mode = quant_cpu::Mode::parse(q.mode.name()).ok_or_else(|| {
            Error::Weights(format!(
                "`{prefix}`: no packed kernels for mode {}",
                q.mode.name()
            ))
        })?;
        let format = quant_cpu::Format::with_mode(mode, q.bits as u32, q.group_size as usize)
            .map_err(|e| Error::Weights(format!("`{prefix}`: {e}")))?
            .with_numerics(numerics);
        if numerics == Numerics::Int8 && !quant_cpu::kernel::int8::vectorized(format) {
            // Never a silent fallback: Status counts these layers.
            tracing::info!(
                layer = prefix,
                "no integer kernel for this format here: exact"
            );
            self.exact_under_int8.push(prefix.to_string());
        }
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
        let (scales, biases) = match biases {
            None => (scales, None),
            Some(b) if kept.contains(&scales.dtype()) && b.dtype() == scales.dtype() => {
                (scales, Some(b))
            }
            Some(b) => (
                scales.as_dtype(Dtype::Float32)?,
                Some(b.as_dtype(Dtype::Float32)?),
            ),
        };
        Ok(MatrixWeight::Packed(in_tiles_where_read(Packed {
            weight,
            scales,
            biases,
            format,
        })?))
    }
}
