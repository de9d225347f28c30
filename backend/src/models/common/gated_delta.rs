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
    c: DeltaConfig,
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
    /// The block at `prefix` (`{prefix}.linear_attn`'s keys); a tensor split is refused.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        c: &DeltaConfig,
        tensor: &Option<TensorCut>,
    ) -> Result<GatedDeltaNet> {
        if tensor.is_some() {
            return Err(Error::Config(
                "tensor parallelism over linear attention is not implemented yet".into(),
            ));
        }
        let (hidden, kd, vd, nv) = (c.hidden_size, c.key_dim(), c.value_dim(), c.v_heads);
        let mut proj = |name: &str, out: i32| {
            Linear::load_split(
                w,
                &format!("{prefix}.{name}"),
                hidden,
                out,
                false,
                Cut::Whole,
            )
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
        let conv_key = format!("{prefix}.conv1d.weight");
        Ok(GatedDeltaNet {
            inputs,
            conv_weight: w.take_float(&conv_key, &[c.conv_dim(), c.conv_kernel, 1])?,
            dt_bias: w.take_float(&format!("{prefix}.dt_bias"), &[nv])?,
            a_log: w.take_float(&format!("{prefix}.A_log"), &[nv])?,
            norm: RmsNorm::load(w, &format!("{prefix}.norm"), c.v_dim, c.rms_norm_eps)?,
            out_proj: Linear::load(w, &format!("{prefix}.out_proj"), vd, hidden, false)?,
            c: *c,
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
        self.out_proj.forward(&out.reshape(&[b, s, -1])?)
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

fn split_error() -> Error {
    Error::Internal("linear attention: a split gave the wrong number of parts".into())
}
