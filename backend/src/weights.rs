//! Strict checkpoint loading: every key is taken exactly once, with its shape checked;
//! a missing, unexpected or misshapen key is an error that names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::error::{read_json, Error, Result};
use crate::lora::{LowRank, Merge, Updates};
use crate::safetensors::{tensor_index, Stored};

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

/// The safetensors files of a model folder: one file, or shards listed in an index.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let index: Value = read_json(&index)?;
        let map = index["weight_map"]
            .as_object()
            .ok_or_else(|| Error::Weights(format!("{}: no weight_map", dir.display())))?;
        let files: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::Weights(format!(
        "{}: no model.safetensors or model.safetensors.index.json",
        dir.display()
    )))
}

/// The checkpoint's arrays (lazy until evaluated), taken one by one by the model builder.
pub struct Weights {
    tensors: HashMap<String, Array>,
    /// Where each tensor of the files lies, so a tensor split reads a rank's part alone
    /// (the whole tensor's lazy array is then never evaluated, so never read).
    stored: HashMap<String, Stored>,
    quant: QuantConfig,
    mode: WeightMode,
    /// Packed layers whose format has no vector kernel on this CPU (they run the portable one).
    portable: Vec<String>,
    /// LoRA updates still to be taken by their linear layers.
    updates: Updates,
    /// Where the tensors read as parts are noted, when a caller asks.
    part_reads: Option<PartReads>,
}

/// The tensors a load read as parts (`Stored::read_part`), by key: the axis and the part
/// count. Every rank cuts a tensor the same way (only its part differs), so rank 0's own load
/// tells which byte runs each worker will read (`Stored::part_runs`); every other tensor a
/// load reads whole.
#[derive(Debug, Clone, Default)]
pub struct PartReads(Arc<Mutex<PartAxes>>);

/// Each tensor read as parts, by key: the axis it was cut along and the part count.
pub type PartAxes = BTreeMap<String, (usize, usize)>;

impl PartReads {
    fn note(&self, key: &str, axis: usize, size: usize) {
        let mut reads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reads.insert(key.to_owned(), (axis, size));
    }

    /// What was noted so far.
    pub fn taken(&self) -> PartAxes {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Weights {
    /// Opens every safetensors file of `dir`; `config` is its parsed config.json.
    pub fn open(dir: &Path, config: &Value, mode: WeightMode) -> Result<Weights> {
        let (mut tensors, mut stored) = (HashMap::new(), HashMap::new());
        for file in safetensors_files(dir)? {
            let part = Array::load_safetensors(&file)
                .map_err(|e| Error::Weights(format!("{}: {e}", file.display())))?;
            tensors.extend(part);
            stored.extend(tensor_index(&file)?);
        }
        let mut weights = Weights::from_arrays(tensors, config, mode)?;
        weights.stored = stored;
        Ok(weights)
    }

    /// For tests: weights from arrays in memory.
    pub fn from_arrays(
        tensors: HashMap<String, Array>,
        config: &Value,
        mode: WeightMode,
    ) -> Result<Weights> {
        Ok(Weights {
            tensors,
            stored: HashMap::new(),
            quant: QuantConfig::from_config(config)?,
            mode,
            portable: Vec::new(),
            updates: Updates::default(),
            part_reads: None,
        })
    }

    /// The same weights with LoRA `updates` for their linear layers to take.
    pub fn with_updates(mut self, updates: Updates) -> Weights {
        self.updates = updates;
        self
    }

    /// The same weights, noting each tensor read as a part in `reads`.
    pub fn with_part_reads(mut self, reads: Option<PartReads>) -> Weights {
        self.part_reads = reads;
        self
    }

    /// How the adapters meet this checkpoint's weights.
    pub fn merge(&self) -> Merge {
        self.updates.merge()
    }

    /// The LoRA update of the linear layer at `prefix` (`in_dim -> out_dim`), cut as its
    /// weight is by `split` (by output, `B`'s columns; by input, `A`'s rows: each rank's
    /// `(x_r A_r) B` then sums with the layer's partial outputs to `(x A) B`), in the mode's
    /// compute dtype; `None` when no adapter names it.
    pub fn low_rank(
        &mut self,
        prefix: &str,
        in_dim: i32,
        out_dim: i32,
        split: Cut,
    ) -> Result<Option<LowRank>> {
        let Some(u) = self.updates.take(prefix, in_dim, out_dim)? else {
            return Ok(None);
        };
        let cut = match split {
            Cut::Whole => u,
            Cut::Rows { rank, size } => LowRank {
                b: shard(&u.b, 1, rank, size, prefix)?,
                a: u.a,
            },
            Cut::Cols { rank, size } => LowRank {
                a: shard(&u.a, 0, rank, size, prefix)?,
                b: u.b,
            },
            Cut::Stacked { .. } => {
                return Err(Error::Internal(format!(
                    "`{prefix}`: a stacked LoRA update"
                )))
            }
        };
        Ok(Some(cut.map(|x| self.to_compute_dtype(x))?))
    }

    pub fn mode(&self) -> WeightMode {
        self.mode
    }

    /// The packed layers taken so far that run the portable kernel on this CPU.
    pub fn portable_layers(&self) -> &[String] {
        &self.portable
    }

    /// Every key not taken yet.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.tensors.contains_key(key)
    }

    /// Takes a key whose shape must be `shape`.
    pub fn take(&mut self, key: &str, shape: &[i32]) -> Result<Array> {
        let array = self
            .tensors
            .remove(key)
            .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))?;
        if array.shape() != shape {
            return Err(Error::Weights(format!(
                "key `{key}` has shape {:?}, expected {shape:?}",
                array.shape()
            )));
        }
        Ok(array)
    }

    /// Takes a key whatever its shape, for a layout conversion whose result is checked when
    /// taken again (DeepSeek-V3's `kv_b_proj` split).
    pub fn take_unchecked(&mut self, key: &str) -> Result<Array> {
        self.tensors
            .remove(key)
            .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))
    }

    /// Puts a converted tensor where the model builder will take it.
    pub fn insert(&mut self, key: &str, array: Array) {
        self.stored.remove(key);
        self.tensors.insert(key.to_string(), array);
    }

    /// Takes a float parameter (norm weight, bias), converted for the weight mode.
    pub fn take_float(&mut self, key: &str, shape: &[i32]) -> Result<Array> {
        let array = self.take(key, shape)?;
        self.to_compute_dtype(array)
    }

    fn to_compute_dtype(&self, array: Array) -> Result<Array> {
        match self.mode {
            WeightMode::DequantizeF32 | WeightMode::PackedF32
                if array.dtype() != Dtype::Float32 =>
            {
                Ok(array.as_dtype(Dtype::Float32)?)
            }
            _ => Ok(array),
        }
    }

    /// The quantized triple at `prefix` for a matrix of `shape`, or `None` if stored dense.
    fn take_quantized(&mut self, prefix: &str, shape: Shape) -> Result<Option<StoredQuantized>> {
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

    /// A quantized matrix as the mode computes with it: as stored, packed, or dequantized.
    fn quantized_for_mode(
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
                let stored = StoredQuantized {
                    weight: cut(self, "weight", stored.weight)?,
                    scales: cut(self, "scales", stored.scales)?,
                    biases: cut(self, "biases", stored.biases)?,
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

    /// A matrix of `shape` at `prefix` (stacked experts, per-head matrices), cut by `split`,
    /// as the weight mode computes with it.
    pub fn matrix(&mut self, prefix: &str, shape: Shape, split: Cut) -> Result<MatrixWeight> {
        self.take_matrix(prefix, shape, split)
    }

    /// Hugging Face's per-expert layout (`{expert(e)}.weight`, ...) stacked into one
    /// `{stacked}.*` tensor per part, as mlx-lm's `sanitize` does; a checkpoint that already
    /// stores `{stacked}.weight` is left as it is. A missing expert is an error naming its key.
    pub fn stack_experts(
        &mut self,
        stacked: &str,
        expert: impl Fn(usize) -> String,
        count: usize,
    ) -> Result<()> {
        if self.contains(&format!("{stacked}.weight")) {
            return Ok(());
        }
        for part in ["weight", "scales", "biases"] {
            if !self.contains(&format!("{}.{part}", expert(0))) {
                continue;
            }
            let parts = (0..count)
                .map(|e| {
                    let key = format!("{}.{part}", expert(e));
                    self.tensors
                        .remove(&key)
                        .ok_or_else(|| Error::Weights(format!("missing key `{key}`")))
                })
                .collect::<Result<Vec<_>>>()?;
            let joined = mlx_rs::ops::stack(&parts, 0).map_err(|e| {
                Error::Weights(format!("`{}.{part}`: experts do not stack: {e}", expert(0)))
            })?;
            self.tensors.insert(format!("{stacked}.{part}"), joined);
        }
        Ok(())
    }

    /// Drops every key `drop` picks (what a family's checkpoints carry that no model uses).
    pub fn drop_keys(&mut self, drop: impl Fn(&str) -> bool) {
        self.tensors.retain(|key, _| !drop(key));
    }

    /// Fails on any key left over that `ignored` (other ranks' parts) does not cover: the
    /// builder took every key the model uses, and `sanitize` dropped what it never uses.
    pub fn finish(self, ignored: impl Fn(&str) -> bool) -> Result<()> {
        let left: Vec<&str> = (self.updates.left().into_iter())
            .filter(|layer| !ignored(&format!("{layer}.weight")))
            .collect();
        if !left.is_empty() {
            return Err(crate::lora::unused(&left));
        }
        let mut unexpected: Vec<&String> = self.tensors.keys().filter(|k| !ignored(k)).collect();
        if unexpected.is_empty() {
            return Ok(());
        }
        unexpected.sort();
        let shown: Vec<&str> = unexpected.iter().take(5).map(|k| k.as_str()).collect();
        Err(Error::Weights(format!(
            "{} unexpected key(s) in the checkpoint: {}{}",
            unexpected.len(),
            shown.join(", "),
            if unexpected.len() > 5 { ", ..." } else { "" }
        )))
    }
}

impl Weights {
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
                    reads.note(key, axis as usize, size);
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
fn shard(a: &Array, axis: i32, rank: usize, size: usize, prefix: &str) -> Result<Array> {
    let part = divides(a.shape(), axis, size, prefix)?;
    let start = part * rank as i32;
    let idx = Array::arange::<i32, i32>(start, start + part, None)?;
    Ok(a.take_axis(&idx, axis)?)
}

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

    fn with_cols(&self, cols: i32) -> Vec<i32> {
        self.count.into_iter().chain([self.rows, cols]).collect()
    }
}

/// A quantized matrix as the checkpoint stores it (this rank's part of it).
struct StoredQuantized {
    weight: Array,
    scales: Array,
    biases: Array,
    q: QuantParams,
}

/// `config.json` `"quantization"`: defaults plus the per-layer overrides mlx-lm writes.
#[derive(Debug, Default)]
struct QuantConfig {
    default: Option<QuantParams>,
    overrides: HashMap<String, QuantParams>,
}

impl QuantConfig {
    fn from_config(config: &Value) -> Result<QuantConfig> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::ops::{concatenate, matmul};
    use mlx_rs::random;

    fn max_diff(x: &Array, y: &Array) -> f32 {
        let d = x
            .subtract(y)
            .and_then(|d| d.abs())
            .and_then(|d| d.max(None));
        d.map_or(f32::INFINITY, |d| d.item_exact::<f32>())
    }

    /// Weights holding one layer's update `[A: in x r, B: r x out]`.
    fn with_update(a: &Array, b: &Array) -> Result<Weights> {
        let updates = Updates::of(
            "l",
            LowRank {
                a: a.clone(),
                b: b.clone(),
            },
            Merge::RunTime,
        );
        let config = serde_json::json!({});
        Ok(
            Weights::from_arrays(HashMap::new(), &config, WeightMode::AsStored)?
                .with_updates(updates),
        )
    }

    /// Cut by output, each rank's term is its columns of the whole; cut by input, the terms
    /// sum to the whole: what tensor parallelism does with the layer's own products.
    #[test]
    fn cut_updates_add_up_to_the_whole() -> Result<()> {
        let (r, i, o) = (3, 8, 6);
        let a = random::normal::<f32>(&[i, r], None, None, None)?;
        let b = random::normal::<f32>(&[r, o], None, None, None)?;
        let x = random::normal::<f32>(&[2, i], None, None, None)?;
        let full = matmul(matmul(&x, &a)?, &b)?;
        let part = |cut| -> Result<LowRank> {
            with_update(&a, &b)?
                .low_rank("l", i, o, cut)?
                .ok_or(Error::NotLoaded)
        };
        let term =
            |u: &LowRank, x: &Array| -> Result<Array> { Ok(matmul(matmul(x, &u.a)?, &u.b)?) };
        let rows = (0..2)
            .map(|rank| term(&part(Cut::Rows { rank, size: 2 })?, &x))
            .collect::<Result<Vec<_>>>()?;
        assert!(max_diff(&concatenate(&rows, 1)?, &full) < 1e-5);
        let half = |rank: i32| -> Result<Array> {
            Ok(x.take_axis(Array::arange::<i32, i32>(rank * 4, rank * 4 + 4, None)?, 1)?)
        };
        let mut cols = term(&part(Cut::Cols { rank: 0, size: 2 })?, &half(0)?)?;
        cols = cols.add(term(&part(Cut::Cols { rank: 1, size: 2 })?, &half(1)?)?)?;
        assert!(max_diff(&cols, &full) < 1e-5);
        Ok(())
    }
}
