//! Tensor cuts: a matrix, its bias or a stacked tensor cut for tensor parallelism, each
//! rank's part read from its file alone when it can be.

use mlx_rs::Array;

use super::quant::QuantizedMatrix;
use super::{MatrixWeight, Weights};
use crate::error::{Error, Result};

/// How one matrix is cut for tensor parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Whole,
    /// By output (all-to-sharded): rank r keeps rows `r*out/n..`.
    Rows {
        rank: usize,
        size: usize,
    },
    /// By input (sharded-to-all): rank r keeps columns `r*in/n..`; the bias stays on rank 0.
    Cols {
        rank: usize,
        size: usize,
    },
    /// Matrices stacked `[count, out, in]` (per-head matrices, experts): rank r keeps
    /// matrices `r*count/n..`.
    Stacked {
        rank: usize,
        size: usize,
    },
}

/// A stored matrix's shape: `[rows, cols]`, or `[count, rows, cols]` for matrices stacked
/// along a first axis (experts, or per-head matrices).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub count: Option<i32>,
    pub rows: i32,
    pub cols: i32,
}

impl Shape {
    pub fn matrix(rows: i32, cols: i32) -> Shape {
        Shape {
            count: None,
            rows,
            cols,
        }
    }

    pub fn stacked(count: i32, rows: i32, cols: i32) -> Shape {
        Shape {
            count: Some(count),
            rows,
            cols,
        }
    }

    fn dims(&self) -> Vec<i32> {
        self.with_cols(self.cols)
    }

    /// The stored dims with `cols` columns (packed codes or quantization groups).
    pub(super) fn with_cols(&self, cols: i32) -> Vec<i32> {
        self.count.into_iter().chain([self.rows, cols]).collect()
    }
}

impl Weights {
    /// A matrix of `shape` at `prefix` (stacked experts, per-head matrices), cut by `split`,
    /// as the weight mode computes with it.
    pub fn matrix(&mut self, prefix: &str, shape: Shape, split: Cut) -> Result<MatrixWeight> {
        self.take_matrix(prefix, shape, split)
    }

    /// The bias of the matrix at `prefix` (`out_dim` values), cut as the matrix is: by output
    /// it is cut too; by input only rank 0 keeps it, so that the sum over ranks adds it once.
    pub fn bias(&mut self, prefix: &str, out_dim: i32, split: Cut) -> Result<Option<Array>> {
        let b = self.take_float(&format!("{prefix}.bias"), &[out_dim])?;
        match split {
            Cut::Whole => Ok(Some(b)),
            Cut::Rows { rank, size } => Ok(Some(shard(&b, 0, rank, size, prefix)?)),
            Cut::Cols { rank, .. } => Ok((rank == 0).then_some(b)),
            Cut::Stacked { .. } => Err(Error::Internal(format!("`{prefix}`: a stacked bias"))),
        }
    }

    /// A vector of one value per head or per output (attention sinks) at `key`, cut by `split`
    /// as the rows of the matrix it goes with: by output it is cut, else it is whole.
    pub fn vector(&mut self, key: &str, len: i32, split: Cut) -> Result<Array> {
        let v = self.take_float(key, &[len])?;
        match split {
            Cut::Rows { rank, size } | Cut::Stacked { rank, size } => shard(&v, 0, rank, size, key),
            Cut::Whole | Cut::Cols { .. } => Ok(v),
        }
    }

    /// The biases (`[count, out]`) of `count` stacked matrices at `prefix`, cut as the
    /// matrices are: by output or by matrix they are cut too; by input only rank 0 keeps them,
    /// so that the sum over ranks adds them once.
    pub fn stacked_bias(
        &mut self,
        prefix: &str,
        (count, out_dim): (i32, i32),
        split: Cut,
    ) -> Result<Option<Array>> {
        let b = self.take_float(&format!("{prefix}.bias"), &[count, out_dim])?;
        match split {
            Cut::Whole => Ok(Some(b)),
            Cut::Rows { rank, size } => Ok(Some(shard(&b, 1, rank, size, prefix)?)),
            Cut::Cols { rank, .. } => Ok((rank == 0).then_some(b)),
            Cut::Stacked { rank, size } => Ok(Some(shard(&b, 0, rank, size, prefix)?)),
        }
    }

    /// A matrix of `shape`, cut by `split` (its rows or columns, after any stacking axis),
    /// dequantized and converted when the mode asks.
    fn take_matrix(&mut self, prefix: &str, shape: Shape, split: Cut) -> Result<MatrixWeight> {
        let lead = i32::from(shape.count.is_some());
        let cut = |w: &mut Weights, part: &str, a: Array| -> Result<Array> {
            let key = format!("{prefix}.{part}");
            match split {
                Cut::Whole => Ok(a),
                Cut::Rows { rank, size } => w.part_of(&key, a, (lead, rank, size)),
                Cut::Cols { rank, size } => w.part_of(&key, a, (lead + 1, rank, size)),
                Cut::Stacked { rank, size } => w.part_of(&key, a, (0, rank, size)),
            }
        };
        match self.take_quantized(prefix, shape)? {
            Some(stored) => {
                if let Cut::Cols { size, .. } = split {
                    if (shape.cols / size as i32) % stored.q.group_size != 0 {
                        return Err(Error::Weights(format!(
                            "`{prefix}`: {} inputs over {size} ranks do not fit quantization group size {}",
                            shape.cols, stored.q.group_size
                        )));
                    }
                }
                let biases = match stored.biases {
                    Some(b) => Some(cut(self, "biases", b)?),
                    None => None,
                };
                let stored = QuantizedMatrix {
                    weight: cut(self, "weight", stored.weight)?,
                    scales: cut(self, "scales", stored.scales)?,
                    biases,
                    q: stored.q,
                };
                self.quantized_for_mode(prefix, stored)
            }
            None => {
                let weight = self.take(&format!("{prefix}.weight"), &shape.dims())?;
                let weight = cut(self, "weight", weight)?;
                Ok(MatrixWeight::Dense(self.to_compute_dtype(weight)?))
            }
        }
    }

    /// Part `rank` of `size` equal parts along `axis` of the tensor `key` (taken as `a`): read
    /// from its file alone when it is a file's tensor as stored, so a rank never reads or
    /// holds the other ranks' parts; else cut from `a` (a converted or stacked tensor).
    fn part_of(
        &mut self,
        key: &str,
        a: Array,
        (axis, rank, size): (i32, usize, usize),
    ) -> Result<Array> {
        let stored = self.stored.remove(key);
        match stored.filter(|s| s.shape == a.shape() && s.dtype == a.dtype()) {
            Some(s) => {
                divides(&s.shape, axis, size, key)?;
                if let Some(reads) = &self.part_reads {
                    reads.note(self.original(key), axis as usize, size);
                }
                s.read_part(axis as usize, rank, size)
            }
            None => shard(&a, axis, rank, size, key),
        }
    }
}

/// Fails unless `shape` divides along `axis` over `size` ranks; the part's length.
fn divides(shape: &[i32], axis: i32, size: usize, prefix: &str) -> Result<i32> {
    let n = shape[axis as usize];
    if n % size as i32 != 0 {
        return Err(Error::Weights(format!(
            "`{prefix}`: {n} along axis {axis} does not divide over {size} ranks"
        )));
    }
    Ok(n / size as i32)
}

/// Part `rank` of `size` equal parts of `a` along `axis`, copied out (a gather, so the
/// full tensor's buffer is not kept alive by a view).
pub(super) fn shard(a: &Array, axis: i32, rank: usize, size: usize, prefix: &str) -> Result<Array> {
    let part = divides(a.shape(), axis, size, prefix)?;
    let start = part * rank as i32;
    let idx = Array::arange::<i32, i32>(start, start + part, None)?;
    Ok(a.take_axis(&idx, axis)?)
}
