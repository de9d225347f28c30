//! A safetensors file's identity without its tensors: what tells two copies apart across
//! ranks, and what a pipeline weighs its layers by; and where each tensor lies, so a tensor
//! split reads a rank's part of a tensor alone.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::error::{Error, Result};

/// A safetensors file's JSON header, as stored (its first 8 bytes give the length).
pub fn safetensors_header(file: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(file).map_err(Error::io(file))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(Error::io(file))?;
    let header_len = u64::from_le_bytes(len).min(100 << 20) as usize;
    let mut header = vec![0u8; header_len];
    f.read_exact(&mut header).map_err(Error::io(file))?;
    Ok(header)
}

/// A safetensors file's name, size and header: what tells two copies apart without reading
/// their tensors.
pub fn file_identity(file: &Path) -> Result<Vec<u8>> {
    let size = std::fs::metadata(file).map_err(Error::io(file))?.len();
    let mut bytes = file
        .file_name()
        .unwrap_or_default()
        .as_encoded_bytes()
        .to_vec();
    bytes.extend(size.to_le_bytes());
    bytes.extend(safetensors_header(file)?);
    Ok(bytes)
}

/// Where a tensor lies in its safetensors file: what reading a part of it alone takes.
#[derive(Debug, Clone)]
pub struct Stored {
    file: Arc<PathBuf>,
    pub dtype: Dtype,
    pub shape: Vec<i32>,
    /// Its first byte, from the file's start.
    offset: u64,
}

/// Every tensor of a safetensors file by name, from its header alone. A tensor whose dtype
/// MLX has no match for, or whose byte range does not fit its shape, is left out: MLX's own
/// loader reports it.
pub fn tensor_index(file: &Path) -> Result<HashMap<String, Stored>> {
    let header = safetensors_header(file)?;
    let parsed: Value = serde_json::from_slice(&header)
        .map_err(|e| Error::Weights(format!("{}: bad safetensors header: {e}", file.display())))?;
    let data_start = 8 + header.len() as u64;
    let file = Arc::new(file.to_path_buf());
    let mut index = HashMap::new();
    for (name, entry) in parsed.as_object().into_iter().flatten() {
        if let Some(stored) = Stored::from_entry(entry, &file, data_start) {
            index.insert(name.clone(), stored);
        }
    }
    Ok(index)
}

impl Stored {
    fn from_entry(entry: &Value, file: &Arc<PathBuf>, data_start: u64) -> Option<Stored> {
        let (dtype, item) = dtype_of(entry["dtype"].as_str()?)?;
        let shape = (entry["shape"].as_array()?.iter())
            .map(|d| i32::try_from(d.as_u64()?).ok())
            .collect::<Option<Vec<i32>>>()?;
        let offsets = entry["data_offsets"].as_array()?;
        let (begin, end) = (offsets.first()?.as_u64()?, offsets.get(1)?.as_u64()?);
        let elements: u64 = shape.iter().map(|&d| d as u64).product();
        (end.checked_sub(begin)? == elements * item).then(|| Stored {
            file: file.clone(),
            dtype,
            shape,
            offset: data_start + begin,
        })
    }

    /// Where part `rank` of `size` equal parts along `axis` lies in the file: the byte runs
    /// [`Stored::read_part`] reads, so rank 0 can tell what a worker reads without reading it.
    pub fn part_runs(&self, axis: usize, rank: usize, size: usize) -> Runs {
        let dims: Vec<u64> = self.shape.iter().map(|&d| d as u64).collect();
        let item = item_size(self.dtype) as u64;
        let part = dims[axis] / size as u64;
        let inner = dims[axis + 1..].iter().product::<u64>() * item;
        let run = part * inner;
        Runs {
            start: self.offset + rank as u64 * run,
            run,
            stride: dims[axis] * inner,
            count: dims[..axis].iter().product(),
        }
    }

    /// Part `rank` of `size` equal parts along `axis` (which must divide), read alone: one
    /// read per contiguous run of its bytes ([`Stored::part_runs`]), never the whole tensor.
    /// Tensor parallelism cuts every matrix this way, so a rank reads (and ever holds) only
    /// its share.
    pub fn read_part(&self, axis: usize, rank: usize, size: usize) -> Result<Array> {
        let runs = self.part_runs(axis, rank, size);
        let run = runs.run as usize;
        let mut bytes = vec![0u8; runs.count as usize * run];
        let path = self.file.as_path();
        let f = std::fs::File::open(path).map_err(Error::io(path))?;
        if run > 0 {
            for (chunk, at) in bytes.chunks_exact_mut(run).zip(runs.starts()) {
                f.read_exact_at(chunk, at).map_err(Error::io(path))?;
            }
        }
        let mut shape = self.shape.clone();
        shape[axis] /= size as i32;
        // SAFETY: `bytes` holds exactly `shape`'s elements of `dtype`, little-endian as
        // safetensors stores them and this host reads them; MLX copies them.
        Ok(unsafe { Array::from_raw_data(bytes.as_ptr().cast(), &shape, self.dtype) })
    }
}

/// Byte runs of a file: `count` runs of `run` bytes, the first at `start`, each `stride`
/// bytes after the one before (a part of a tensor cut along one axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runs {
    pub start: u64,
    pub run: u64,
    pub stride: u64,
    pub count: u64,
}

impl Runs {
    /// Each run's first byte, from the file's start.
    pub fn starts(self) -> impl Iterator<Item = u64> {
        (0..self.count).map(move |o| self.start + o * self.stride)
    }
}

/// A safetensors dtype name as MLX's dtype and its bytes per element.
fn dtype_of(name: &str) -> Option<(Dtype, u64)> {
    let dtype = match name {
        "BOOL" => Dtype::Bool,
        "U8" => Dtype::Uint8,
        "I8" => Dtype::Int8,
        "U16" => Dtype::Uint16,
        "I16" => Dtype::Int16,
        "F16" => Dtype::Float16,
        "BF16" => Dtype::Bfloat16,
        "U32" => Dtype::Uint32,
        "I32" => Dtype::Int32,
        "F32" => Dtype::Float32,
        "U64" => Dtype::Uint64,
        "I64" => Dtype::Int64,
        "F64" => Dtype::Float64,
        _ => return None,
    };
    Some((dtype, item_size(dtype) as u64))
}

fn item_size(dtype: Dtype) -> usize {
    match dtype {
        Dtype::Bool | Dtype::Uint8 | Dtype::Int8 => 1,
        Dtype::Uint16 | Dtype::Int16 | Dtype::Float16 | Dtype::Bfloat16 => 2,
        Dtype::Uint32 | Dtype::Int32 | Dtype::Float32 => 4,
        Dtype::Uint64 | Dtype::Int64 | Dtype::Float64 | Dtype::Complex64 => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part along every axis, of a float and a packed-integer tensor, equals the same
    /// part cut from the whole tensor as MLX loads it.
    #[test]
    fn a_part_read_alone_equals_the_part_of_the_whole() -> Result<()> {
        let f = Array::from_iter((0..48).map(|i| i as f32 * 0.5), &[2, 4, 6]);
        let u = Array::from_iter(0..24u32, &[4, 6]);
        let file =
            std::env::temp_dir().join(format!("mlxd-parts-{}.safetensors", std::process::id()));
        let saved = [("f", &f), ("u", &u)];
        Array::save_safetensors(saved, None, &file).map_err(|e| Error::Weights(e.to_string()))?;
        let checked = check_parts(&file, &saved);
        let _ = std::fs::remove_file(&file);
        checked
    }

    fn check_parts(file: &Path, saved: &[(&str, &Array)]) -> Result<()> {
        let index = tensor_index(file)?;
        for &(name, whole) in saved {
            let stored = &index[name];
            assert_eq!(stored.dtype, whole.dtype());
            for axis in 0..whole.ndim() {
                for rank in 0..2 {
                    let part = whole.shape()[axis] / 2;
                    let idx = Array::arange::<i32, i32>(rank * part, (rank + 1) * part, None)?;
                    let want = whole.take_axis(&idx, axis as i32)?;
                    let got = stored.read_part(axis, rank as usize, 2)?;
                    assert_eq!(got.shape(), want.shape(), "{name} axis {axis} rank {rank}");
                    assert!(got.eq_values(&want)?, "{name} axis {axis} rank {rank}");
                }
            }
        }
        Ok(())
    }
}
