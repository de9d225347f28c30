//! Gated DeltaNet's linear attention (Qwen3-Next, Qwen3.5), op for op as mlx-lm's
//! `GatedDeltaNet` on the CPU, where `gated_delta_update` takes its ops path: a causal
//! depthwise convolution over q, k and v, then a delta-rule recurrence one position at a time.
//! Each row keeps its own state ([`RecurrentState`]), with a checkpoint every
//! `CHECKPOINT_EVERY` positions.

use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::ops::{
    concatenate, conv1d, exp, logaddexp, sigmoid, split_at_indices, stack, zeros_dtype,
};
use mlx_rs::{fast, Array, Dtype};

use super::{Linear, RmsNorm, TensorCut};
use crate::cache::{Checkpoint, RecurrentState, CHECKPOINT_EVERY};
use crate::error::{Error, Result};
use crate::weights::{Cut, Weights};

/// The projections' layout in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaProjections {
    /// `in_proj_qkvz` and `in_proj_ba`, interleaved by key head (Qwen3-Next).
    Interleaved,
    /// `in_proj_qkv`, `in_proj_z`, `in_proj_b` and `in_proj_a` (Qwen3.5).
    Separate,
}

/// A Gated DeltaNet block's sizes, from the family's config.
#[derive(Debug, Clone, Copy)]
pub struct DeltaConfig {
    pub hidden_size: i32,
    pub k_heads: i32,
    pub v_heads: i32,
    pub k_dim: i32,
    pub v_dim: i32,
    pub conv_kernel: i32,
    pub rms_norm_eps: f32,
    pub projections: DeltaProjections,
}

impl DeltaConfig {
    /// One rank's share of `size`: its key and value heads (whole groups of them).
    fn part(&self, size: i32) -> DeltaConfig {
        DeltaConfig {
            k_heads: self.k_heads / size,
            v_heads: self.v_heads / size,
            ..*self
        }
    }

    /// What a tensor split must divide, named by their config keys.
    pub fn tensor_counts(&self) -> [(&'static str, i32); 2] {
        [
            ("linear_num_key_heads", self.k_heads),
            ("linear_num_value_heads", self.v_heads),
        ]
    }

    fn key_dim(&self) -> i32 {
        self.k_heads * self.k_dim
    }

    fn value_dim(&self) -> i32 {
        self.v_heads * self.v_dim
    }

    /// The convolution's channels: q, k and v side by side.
    fn conv_dim(&self) -> i32 {
        2 * self.key_dim() + self.value_dim()
    }
}

/// The input projections, in either layout.
enum InProjections {
    Interleaved {
        qkvz: Linear,
        ba: Linear,
    },
    Separate {
        qkv: Linear,
        z: Linear,
        b: Linear,
        a: Linear,
    },
}

pub struct GatedDeltaNet {
    inputs: InProjections,
    /// `[conv_dim, kernel, 1]`: one filter per channel.
    conv_weight: Array,
    dt_bias: Array,
    a_log: Array,
    norm: RmsNorm,
    out_proj: Linear,
    /// This rank's sizes (its share of the heads under a tensor split).
    c: DeltaConfig,
    tensor: Option<TensorCut>,
}

/// One step's inputs to the recurrence, per position: [B, S, heads, dim] (g and beta [B, S, Hv]).
struct Recurrence {
    q: Array,
    k: Array,
    v: Array,
    g: Array,
    beta: Array,
}

impl GatedDeltaNet {
    /// The block at `prefix` (`{prefix}.linear_attn`'s keys). A tensor split gives each rank
    /// whole key heads and their value heads: the input projections cut by output (q, k and
    /// v each, where they are one tensor), the convolution's channels likewise, `dt_bias` and
    /// `A_log` by head, `out_proj` by input and summed over the ranks (mlx-lm's `shard`).
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        c: &DeltaConfig,
        tensor: &Option<TensorCut>,
    ) -> Result<GatedDeltaNet> {
        let size = tensor.as_ref().map_or(1, |t| t.size);
        let local = c.part(size as i32);
        let (hidden, kd, vd, nv) = (c.hidden_size, c.key_dim(), c.value_dim(), c.v_heads);
        let segments = [kd, kd, vd];
        if let (DeltaProjections::Separate, Some(_)) = (c.projections, tensor) {
            // q, k and v are cut each: their rows laid out rank by rank, then cut as one.
            segment_rows(w, &format!("{prefix}.in_proj_qkv"), &segments, size)?;
        }
        let mut proj = |name: &str, out: i32| {
            let key = format!("{prefix}.{name}");
            Linear::load_split(w, &key, hidden, out, false, Cut::rows(tensor))
        };
        let inputs = match c.projections {
            DeltaProjections::Interleaved => InProjections::Interleaved {
                qkvz: proj("in_proj_qkvz", 2 * kd + 2 * vd)?,
                ba: proj("in_proj_ba", 2 * nv)?,
            },
            DeltaProjections::Separate => InProjections::Separate {
                qkv: proj("in_proj_qkv", 2 * kd + vd)?,
                z: proj("in_proj_z", vd)?,
                b: proj("in_proj_b", nv)?,
                a: proj("in_proj_a", nv)?,
            },
        };
        let conv = w.take_float(
            &format!("{prefix}.conv1d.weight"),
            &[c.conv_dim(), c.conv_kernel, 1],
        )?;
        let rank = tensor.as_ref().map_or(0, |t| t.rank);
        let by_head = |w: &mut Weights, name: &str| -> Result<Array> {
            let v = w.take_float(&format!("{prefix}.{name}"), &[nv])?;
            take_rows(&v, &rows_of(&[nv], rank, size))
        };
        Ok(GatedDeltaNet {
            inputs,
            conv_weight: take_rows(&conv, &rows_of(&segments, rank, size))?,
            dt_bias: by_head(w, "dt_bias")?,
            a_log: by_head(w, "A_log")?,
            norm: RmsNorm::load(w, &format!("{prefix}.norm"), c.v_dim, c.rms_norm_eps)?,
            out_proj: Linear::load_split(
                w,
                &format!("{prefix}.out_proj"),
                vd,
                hidden,
                false,
                Cut::cols(tensor),
            )?,
            c: local,
            tensor: tensor.clone(),
        })
    }

    /// `x`: [B, S, hidden]; row b continues `states[b]` (rows of a batch decode one position
    /// each).
    pub fn forward(&self, x: &Array, states: &mut [&mut RecurrentState]) -> Result<Array> {
        let (b, s) = (x.shape()[0], x.shape()[1]);
        if b != states.len() as i32 {
            return Err(Error::Internal(format!(
                "{b} rows for {} states",
                states.len()
            )));
        }
        let (qkv, z, beta_in, a) = self.project(x)?;
        let conv_state = self.stacked(
            states,
            |st| st.map(|(c, _)| c.clone()),
            |n| zeros_dtype(&[n, self.c.conv_kernel - 1, self.c.conv_dim()], x.dtype()),
        )?;
        let conv_input = concatenate(&[conv_state, qkv], 1)?;
        let conv_out = conv1d(&conv_input, &self.conv_weight, 1, 0, 1, self.c.conv_dim())?;
        let conv_out = mlx_rs::nn::silu(conv_out)?;
        let r = self.recurrence(&conv_out, &a, &beta_in, (b, s))?;
        let state = self.stacked(
            states,
            |st| st.map(|(_, s)| s.clone()),
            |n| {
                let c = &self.c;
                zeros_dtype(&[n, c.v_heads, c.v_dim, c.k_dim], Dtype::Float32)
            },
        )?;
        let (ys, steps) = self.recur(r, state)?;
        self.keep(states, &conv_input, &steps, s)?;
        let out = self.gated_norm(&ys, &z)?;
        TensorCut::all_sum(
            &self.tensor,
            self.out_proj.forward(&out.reshape(&[b, s, -1])?)?,
        )
    }

    /// qkv [B, S, conv_dim], z [B, S, Hv, dv], b and a [B, S, Hv], as mlx-lm splits them.
    fn project(&self, x: &Array) -> Result<(Array, Array, Array, Array)> {
        let (b, s) = (x.shape()[0], x.shape()[1]);
        let c = &self.c;
        match &self.inputs {
            InProjections::Separate { qkv, z, b: pb, a } => Ok((
                qkv.forward(x)?,
                z.forward(x)?.reshape(&[b, s, c.v_heads, c.v_dim])?,
                pb.forward(x)?,
                a.forward(x)?,
            )),
            InProjections::Interleaved { qkvz, ba } => {
                let (nk, dn, dv) = (c.k_heads, c.k_dim, c.v_dim);
                let per = c.v_heads / nk;
                let mixed = qkvz.forward(x)?.reshape(&[b, s, nk, -1])?;
                let parts = split_at_indices(&mixed, &[dn, 2 * dn, 2 * dn + per * dv], -1)?;
                let [q, k, v, z]: [Array; 4] = parts.try_into().map_err(|_| split_error())?;
                let mixed_ba = ba.forward(x)?.reshape(&[b, s, nk, -1])?;
                let parts = split_at_indices(&mixed_ba, &[per], -1)?;
                let [pb, a]: [Array; 2] = parts.try_into().map_err(|_| split_error())?;
                let v = v.reshape(&[b, s, -1, dv])?;
                let qkv = concatenate(
                    &[
                        q.reshape(&[b, s, -1])?,
                        k.reshape(&[b, s, -1])?,
                        v.reshape(&[b, s, -1])?,
                    ],
                    -1,
                )?;
                let z = z.reshape(&[b, s, -1, dv])?;
                Ok((
                    qkv,
                    z,
                    pb.reshape(&[b, s, c.v_heads])?,
                    a.reshape(&[b, s, c.v_heads])?,
                ))
            }
        }
    }

    /// The rows' states stacked ([B, ...]): `part` of each row's, or `fresh` for a row at 0.
    fn stacked(
        &self,
        states: &[&mut RecurrentState],
        part: impl Fn(Option<(&Array, &Array)>) -> Option<Array>,
        fresh: impl Fn(i32) -> std::result::Result<Array, mlx_rs::error::Exception>,
    ) -> Result<Array> {
        let parts: Vec<Option<Array>> = states.iter().map(|st| part(st.arrays())).collect();
        if parts.iter().all(Option::is_none) {
            return Ok(fresh(parts.len() as i32)?);
        }
        let rows = (parts.into_iter())
            .map(|p| match p {
                Some(p) => Ok(p),
                None => Ok(fresh(1)?),
            })
            .collect::<Result<Vec<Array>>>()?;
        match rows.as_slice() {
            [one] => Ok(one.clone()),
            _ => Ok(concatenate(&rows, 0)?),
        }
    }

    /// q, k, v from the convolution's output, q and k normalized (mlx-lm's `normalize_qk`,
    /// which folds `k_dim^-0.5` into q), g and beta from a and b (`compute_g`, `sigmoid`);
    /// q and k repeated to the value heads.
    fn recurrence(
        &self,
        conv_out: &Array,
        a: &Array,
        b: &Array,
        (n, s): (i32, i32),
    ) -> Result<Recurrence> {
        let c = &self.c;
        let kd = c.key_dim();
        let parts = split_at_indices(conv_out, &[kd, 2 * kd], -1)?;
        let [q, k, v]: [Array; 3] = parts.try_into().map_err(|_| split_error())?;
        let q = q.reshape(&[n, s, c.k_heads, c.k_dim])?;
        let k = k.reshape(&[n, s, c.k_heads, c.k_dim])?;
        let v = v.reshape(&[n, s, c.v_heads, c.v_dim])?;
        let inv_scale = f64::from(c.k_dim).powf(-0.5);
        let rms_eps = (1e-6 * inv_scale * inv_scale) as f32;
        let q = Array::from_f32((inv_scale * inv_scale) as f32)
            .multiply(fast::rms_norm(&q, None, rms_eps)?)?;
        let k = Array::from_f32(inv_scale as f32).multiply(fast::rms_norm(&k, None, rms_eps)?)?;
        let decay = exp(&self.a_log.as_dtype(Dtype::Float32)?)?.negative()?;
        let g = exp(decay.multiply(logaddexp(a.add(&self.dt_bias)?, Array::from_int(0))?)?)?;
        let beta = sigmoid(b)?;
        let (q, k) = match c.v_heads / c.k_heads {
            1 => (q, k),
            r => (
                mlx_rs::ops::repeat_axis::<f32>(q, r, -2)?,
                mlx_rs::ops::repeat_axis::<f32>(k, r, -2)?,
            ),
        };
        Ok(Recurrence { q, k, v, g, beta })
    }

    /// mlx-lm's `gated_delta_ops`: one `_gated_delta_step_ops` per position. The outputs
    /// [B, S, Hv, dv], and the state after each position.
    fn recur(&self, r: Recurrence, mut state: Array) -> Result<(Array, Vec<Array>)> {
        let s = r.q.shape()[1];
        let (mut ys, mut steps) = (
            Vec::with_capacity(s as usize),
            Vec::with_capacity(s as usize),
        );
        for t in 0..s {
            let at = |x: &Array| x.index((.., t));
            let (q, k, v) = (at(&r.q), at(&r.k), at(&r.v));
            let (g, beta) = (at(&r.g), at(&r.beta));
            state = state.multiply(g.expand_dims(-1)?.expand_dims(-1)?)?;
            let k_row = k.expand_dims(-2)?;
            let kv_mem = state.multiply(&k_row)?.sum_axis(-1, false)?;
            let delta = v.subtract(&kv_mem)?.multiply(beta.expand_dims(-1)?)?;
            state = state.add(k_row.multiply(delta.expand_dims(-1)?)?)?;
            let y = state.multiply(q.expand_dims(-2)?)?.sum_axis(-1, false)?;
            ys.push(y.as_dtype(q.dtype())?);
            steps.push(state.clone());
        }
        Ok((stack(&ys, 1)?, steps))
    }

    /// Each row's new state, and its checkpoints at the multiples of `CHECKPOINT_EVERY` this
    /// step passed (the convolution's inputs before each, the recurrence after).
    fn keep(
        &self,
        states: &mut [&mut RecurrentState],
        conv_input: &Array,
        steps: &[Array],
        s: i32,
    ) -> Result<()> {
        let keep = self.c.conv_kernel - 1;
        let total = conv_input.shape()[1];
        for (row, st) in states.iter_mut().enumerate() {
            let row = row as i32;
            let conv_at = |end: i32| -> Result<Array> {
                let conv = conv_input.index((row..row + 1, end - keep..end, ..));
                Ok(conv.contiguous()?)
            };
            let state_at = |t: usize| steps[t].index((row..row + 1, .., .., ..));
            let passed = (0..s)
                .filter(|t| (st.offset() + t + 1) % CHECKPOINT_EVERY == 0)
                .map(|t| {
                    Ok(Checkpoint {
                        at: st.offset() + t + 1,
                        conv: conv_at(keep + t + 1)?,
                        state: state_at(t as usize),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let last = steps
                .last()
                .ok_or_else(|| Error::Internal("no positions".into()))?;
            let state = last.index((row..row + 1, .., .., ..));
            st.advance((conv_at(total)?, state), s, passed);
        }
        Ok(())
    }

    /// mlx-lm's `Qwen3NextRMSNormGated`: the outputs RMS-normed per head, times `silu(z)` in
    /// f32 (`precise_swiglu`), back in the outputs' dtype.
    fn gated_norm(&self, ys: &Array, z: &Array) -> Result<Array> {
        let normed = self.norm.forward(ys)?;
        let gate = mlx_rs::nn::silu(z.as_dtype(Dtype::Float32)?)?;
        Ok(gate
            .multiply(normed.as_dtype(Dtype::Float32)?)?
            .as_dtype(ys.dtype())?)
    }

    /// Bytes one sequence's state takes (the convolution's inputs and the recurrence).
    pub fn state_bytes(&self) -> usize {
        let c = &self.c;
        let conv = (c.conv_kernel - 1) * c.conv_dim();
        let conv_bytes = conv as usize * self.conv_weight.item_size();
        conv_bytes + (c.v_heads * c.v_dim * c.k_dim) as usize * 4
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let inputs: Vec<&Linear> = match &self.inputs {
            InProjections::Interleaved { qkvz, ba } => vec![qkvz, ba],
            InProjections::Separate { qkv, z, b, a } => vec![qkv, z, b, a],
        };
        let mut out: Vec<&Array> = inputs.into_iter().flat_map(Linear::arrays).collect();
        out.extend([
            &self.conv_weight,
            &self.dt_bias,
            &self.a_log,
            &self.norm.weight,
        ]);
        out.extend(self.out_proj.arrays());
        out
    }
}

/// Rank `rank`'s rows of `size` when each of `segments` (consecutive row blocks) is cut in
/// `size` equal parts: its part of each block, in order.
fn rows_of(segments: &[i32], rank: usize, size: usize) -> Vec<i32> {
    let (rank, size) = (rank as i32, size as i32);
    let mut rows = Vec::new();
    let mut start = 0;
    for seg in segments {
        let part = seg / size;
        rows.extend(start + rank * part..start + (rank + 1) * part);
        start += seg;
    }
    rows
}

/// `rows` of `a` (along its first axis), copied out.
fn take_rows(a: &Array, rows: &[i32]) -> Result<Array> {
    let all = (0..a.shape()[0]).eq(rows.iter().copied());
    if all {
        return Ok(a.clone());
    }
    let idx = Array::from_slice(rows, &[rows.len() as i32]);
    Ok(a.take_axis(&idx, 0)?)
}

/// Lays out the rows of the matrix at `prefix` (and its quantization's) rank by rank, each
/// rank's part of every segment together, so that a cut by output gives each rank its parts.
fn segment_rows(w: &mut Weights, prefix: &str, segments: &[i32], size: usize) -> Result<()> {
    let order: Vec<i32> = (0..size).flat_map(|r| rows_of(segments, r, size)).collect();
    for part in ["weight", "scales", "biases"] {
        let key = format!("{prefix}.{part}");
        if !w.contains(&key) {
            continue;
        }
        let a = w.take_unchecked(&key)?;
        if a.shape().first() != Some(&(order.len() as i32)) {
            return Err(Error::Weights(format!(
                "`{key}` has shape {:?}, expected {} rows",
                a.shape(),
                order.len()
            )));
        }
        w.insert(&key, take_rows(&a, &order)?);
    }
    Ok(())
}

fn split_error() -> Error {
    Error::Internal("linear attention: a split gave the wrong number of parts".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rank takes its part of every segment; laid out rank by rank, the rows are a
    /// permutation that a cut by output splits into those parts.
    #[test]
    fn segments_are_cut_rank_by_rank() -> Result<()> {
        assert_eq!(rows_of(&[4, 4, 2], 1, 2), [2, 3, 6, 7, 9]);
        assert_eq!(rows_of(&[4, 2], 0, 1), [0, 1, 2, 3, 4, 5]);
        let a = Array::from_slice(&[10.0f32, 11.0, 12.0, 13.0], &[4]);
        let permuted = take_rows(&a, &[2, 3, 0, 1])?;
        assert_eq!(permuted.as_slice::<f32>(), [12.0, 13.0, 10.0, 11.0]);
        assert_eq!(
            take_rows(&a, &[0, 1, 2, 3])?.as_slice::<f32>(),
            a.as_slice::<f32>()
        );
        Ok(())
    }
}
