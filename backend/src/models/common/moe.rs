//! Mixture-of-experts feed-forward blocks, as mlx-lm's `SwitchGLU` and its families' routers
//! compute them: experts stacked in 3-D tensors, each token through its top-k experts.

use mlx_rs::ops::indexing::{topk_axis, IndexOp};
use mlx_rs::ops::{
    argpartition_axis, argsort_axis, broadcast_to, gather_mm, sigmoid, softmax_axis,
};
use mlx_rs::{Array, Dtype};

use super::{positive, ExpertCut, Linear, Mlp, TensorCut};
use crate::error::{Error, Result};
use crate::weights::{Cut, MatrixWeight, Packed, QuantizedMatrix, Shape, Weights};

/// Below this many (token, expert) pairs the rows go in token order; from it on they are
/// sorted by expert so that each expert's weights are read once (mlx-lm's threshold).
const SORT_FROM: i32 = 64;

/// One projection of every expert: weights `[experts, out, in]`.
pub enum SwitchLinear {
    Dense(Array),
    /// As stored, through MLX's `gather_qmm` in the checkpoint's mode (what mlx-lm runs).
    Quantized(QuantizedMatrix),
    /// Packed, through `quant-cpu`'s gathered kernel (f32 numerics, the checkpoint's bytes).
    Packed(Packed),
}

impl SwitchLinear {
    /// `{prefix}.weight` (and its quantization) for `experts` experts of `in_dim -> out_dim`.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        experts: i32,
        (in_dim, out_dim): (i32, i32),
        split: Cut,
    ) -> Result<SwitchLinear> {
        let shape = Shape::stacked(experts, out_dim, in_dim);
        Ok(match w.matrix(prefix, shape, split)? {
            MatrixWeight::Dense(weight) => SwitchLinear::Dense(weight),
            MatrixWeight::Packed(packed) => SwitchLinear::Packed(packed),
            MatrixWeight::Quantized(matrix) => SwitchLinear::Quantized(matrix),
        })
    }

    /// Row r of `x` ([R, in]) through expert `experts[r]`: [R, out].
    pub fn forward(&self, x: &Array, experts: &Array, sorted: bool) -> Result<Array> {
        let rows = || x.expand_dims(-2);
        Ok(match self {
            SwitchLinear::Dense(weight) => {
                gather_mm(rows()?, weight.swap_axes(-1, -2)?, None, experts, sorted)?
                    .squeeze_axes(&[-2])?
            }
            SwitchLinear::Quantized(matrix) => matrix
                .gather(&rows()?, experts, sorted)?
                .squeeze_axes(&[-2])?,
            SwitchLinear::Packed(p) => quant_cpu::gather_quantized_matmul(
                x,
                &p.weight,
                &p.scales,
                p.biases.as_ref(),
                experts,
                p.format,
            )?,
        })
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            SwitchLinear::Dense(weight) => vec![weight],
            SwitchLinear::Quantized(matrix) => matrix.arrays(),
            SwitchLinear::Packed(p) => p.arrays(),
        }
    }
}

/// Every expert's SwiGLU; tensor-parallel, each expert's intermediate neurons are cut, or
/// (expert parallel) each rank holds a range of whole experts.
pub struct SwitchGlu {
    pub gate_proj: SwitchLinear,
    pub up_proj: SwitchLinear,
    pub down_proj: SwitchLinear,
    /// The experts this rank holds, when it holds only some (expert parallelism).
    local: Option<LocalExperts>,
}

/// Experts `first..first + count` of the model, held by this rank.
#[derive(Debug, Clone, Copy)]
struct LocalExperts {
    first: i32,
    count: i32,
}

/// Hugging Face's per-expert layout (`{mlp}.experts.{e}.{gate,up,down}_proj.*`) stacked into
/// mlx-lm's `{mlp}.switch_mlp.*_proj.*` for every block that has it (found by its expert 0, so a
/// hostile layer count costs nothing), as mlx-lm's `sanitize` does. A missing expert is an
/// error naming its key; `field` names the config field that counts the experts.
pub fn stack_experts(w: &mut Weights, (field, experts): (&str, i32)) -> Result<()> {
    let experts = positive(field, experts, MAX_EXPERTS)? as usize;
    for proj in ["gate_proj", "up_proj", "down_proj"] {
        let suffix = format!(".experts.0.{proj}.weight");
        let blocks: Vec<String> = w
            .keys()
            .filter_map(|k| k.strip_suffix(&suffix).map(str::to_string))
            .collect();
        for mlp in blocks {
            w.stack_experts(
                &format!("{mlp}.switch_mlp.{proj}"),
                |e| format!("{mlp}.experts.{e}.{proj}"),
                experts,
            )?;
        }
    }
    Ok(())
}

impl SwitchGlu {
    /// `{prefix}.{gate,up,down}_proj`, stacked (see [`stack_experts`] for Hugging Face's
    /// per-expert layout).
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        experts: i32,
        (hidden, inter): (i32, i32),
        tensor: &Option<TensorCut>,
    ) -> Result<SwitchGlu> {
        let mut part = |name: &str, dims: (i32, i32), split: Cut| {
            SwitchLinear::load(w, &format!("{prefix}.{name}"), experts, dims, split)
        };
        let whole = TensorCut::expert_cut(tensor) == Some(ExpertCut::Whole);
        let (in_split, out_split) = match whole {
            true => (Cut::stacked(tensor), Cut::stacked(tensor)),
            false => (Cut::rows(tensor), Cut::cols(tensor)),
        };
        let local = match (whole, tensor) {
            (true, Some(t)) => {
                let count = experts / t.size as i32;
                Some(LocalExperts {
                    first: count * t.rank as i32,
                    count,
                })
            }
            _ => None,
        };
        Ok(SwitchGlu {
            gate_proj: part("gate_proj", (hidden, inter), in_split)?,
            up_proj: part("up_proj", (hidden, inter), in_split)?,
            down_proj: part("down_proj", (inter, hidden), out_split)?,
            local,
        })
    }

    /// The experts of `flat` as this rank indexes them, and the rows to zero afterwards:
    /// with every expert here, the same; with some (expert parallelism), pairs whose expert
    /// another rank holds are passed as -1 to quant-cpu (a zero row, nothing read), or
    /// clamped to 0 and masked out for MLX's products, which have no such index.
    fn local_indices(&self, flat: &Array) -> Result<(Array, Option<Array>)> {
        let Some(l) = self.local else {
            return Ok((flat.clone(), None));
        };
        let shifted = flat
            .as_dtype(Dtype::Int32)?
            .subtract(Array::from_int(l.first))?;
        let inside = mlx_rs::ops::logical_and(
            mlx_rs::ops::ge(&shifted, Array::from_int(0))?,
            mlx_rs::ops::lt(&shifted, Array::from_int(l.count))?,
        )?;
        if let SwitchLinear::Packed(_) = self.gate_proj {
            let idx = mlx_rs::ops::select(&inside, &shifted, Array::from_int(-1))?;
            return Ok((idx, None));
        }
        let idx = mlx_rs::ops::select(&inside, &shifted, Array::from_int(0))?;
        Ok((idx.as_dtype(Dtype::Uint32)?, Some(inside.expand_dims(-1)?)))
    }

    /// Tokens `x` ([T, hidden]) through their experts `inds` ([T, k]): [T, k, hidden].
    pub fn forward(&self, x: &Array, inds: &Array) -> Result<Array> {
        let (tokens, k, hidden) = (x.shape()[0], inds.shape()[1], x.shape()[1]);
        let (flat, keep) = self.local_indices(&inds.reshape(&[-1])?.as_dtype(Dtype::Uint32)?)?;
        let y = match tokens * k < SORT_FROM {
            true => {
                let rows = broadcast_to(x.expand_dims(1)?, &[tokens, k, hidden])?
                    .reshape(&[-1, hidden])?;
                self.rows(&rows, &flat, false)?
            }
            false => {
                let order = argsort_axis(&flat, 0)?;
                let token_of = order.floor_divide(Array::from_int(k).as_dtype(order.dtype())?)?;
                let y = self.rows(
                    &x.take_axis(&token_of, 0)?,
                    &flat.take_axis(&order, 0)?,
                    true,
                )?;
                y.take_axis(&argsort_axis(&order, 0)?, 0)?
            }
        };
        let y = match keep {
            Some(keep) => y.multiply(keep.as_dtype(y.dtype())?)?,
            None => y,
        };
        Ok(y.reshape(&[tokens, k, -1])?)
    }

    fn rows(&self, x: &Array, experts: &Array, sorted: bool) -> Result<Array> {
        let up = self.up_proj.forward(x, experts, sorted)?;
        let gate = self.gate_proj.forward(x, experts, sorted)?;
        let h = mlx_rs::nn::silu(gate)?.multiply(up)?;
        self.down_proj.forward(&h, experts, sorted)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        [&self.gate_proj, &self.up_proj, &self.down_proj]
            .into_iter()
            .flat_map(SwitchLinear::arrays)
            .collect()
    }
}

/// How a family's router turns gate logits into experts and their weights.
pub enum Routing {
    /// Qwen3-MoE: softmax over experts, the top k, optionally renormalized.
    Softmax { top_k: i32, norm_topk_prob: bool },
    /// DeepSeek-V2: softmax, greedy or group-limited greedy top k, scaled.
    SoftmaxGroups {
        top_k: i32,
        groups: Option<Groups>,
        scaling: f32,
    },
    /// DeepSeek-V3 (`noaux_tc`): sigmoid, selection biased by `e_score_correction_bias`
    /// within the best groups, weights from the unbiased scores, normalized and scaled.
    Sigmoid {
        top_k: i32,
        groups: Groups,
        norm_topk_prob: bool,
        scaling: f32,
        correction: Array,
    },
}

/// Group-limited routing: experts in `count` groups, only the best `keep` groups chosen.
#[derive(Debug, Clone, Copy)]
pub struct Groups {
    pub count: i32,
    pub keep: i32,
}

impl Groups {
    /// `n_group`/`topk_group` from config.json, checked against the expert count.
    pub fn new(count: i32, keep: i32, experts: i32) -> Result<Groups> {
        if count < 1 || keep < 1 || keep > count || experts % count != 0 {
            return Err(Error::Config(format!(
                "n_group {count} and topk_group {keep} do not fit {experts} experts (n_group \
                 must divide the experts and topk_group be in 1..=n_group)"
            )));
        }
        Ok(Groups { count, keep })
    }

    /// Groups ranked by the sum of their two best scores (DeepSeek-V3's `noaux_tc`): each group
    /// must hold at least two experts when there are several.
    pub fn ranked_by_two(count: i32, keep: i32, experts: i32) -> Result<Groups> {
        if count > 1 && experts / count.max(1) < 2 {
            return Err(Error::Config(format!(
                "n_group {count} leaves fewer than 2 of the {experts} experts per group"
            )));
        }
        Groups::new(count, keep, experts)
    }

    /// Zeroes the scores of every group outside the best `keep` (ranked by `rank`).
    fn mask(&self, scores: &Array, rank: impl Fn(&Array) -> Result<Array>) -> Result<Array> {
        let shape = scores.shape().to_vec();
        let (lead, experts) = shape.split_at(shape.len() - 1);
        let grouped: Vec<i32> = lead
            .iter()
            .copied()
            .chain([self.count, experts[0] / self.count])
            .collect();
        let scores = scores.reshape(&grouped)?;
        let drop = self.count - self.keep;
        if drop == 0 {
            return Ok(scores.reshape(&shape)?);
        }
        let group_idx =
            argpartition_axis(rank(&scores)?, drop - 1, -2)?.index((.., .., ..drop, ..));
        let zero = Array::from_f32(0.0).as_dtype(scores.dtype())?;
        Ok(scores
            .put_along_axis(&group_idx, &zero, -2)?
            .reshape(&shape)?)
    }
}

/// The router: gate logits for every expert, then the family's selection.
pub struct Router {
    pub gate: Linear,
    pub routing: Routing,
}

impl Router {
    /// Expert indices and their weights, both [B, L, k], for `x` ([B, L, hidden]).
    pub fn route(&self, x: &Array) -> Result<(Array, Array)> {
        let gates = self.gate.forward(x)?;
        match &self.routing {
            Routing::Softmax {
                top_k,
                norm_topk_prob,
            } => {
                let gates = softmax_axis(&gates, -1, true)?;
                let experts = gates.shape()[gates.ndim() - 1];
                let inds = argpartition_axis(&gates, experts - top_k, -1)?.index((
                    ..,
                    ..,
                    experts - top_k..,
                ));
                let scores = gates.take_along_axis(&inds, -1)?;
                let scores = match norm_topk_prob {
                    true => scores.divide(scores.sum_axis(-1, true)?)?,
                    false => scores,
                };
                Ok((inds, scores))
            }
            Routing::SoftmaxGroups {
                top_k,
                groups,
                scaling,
            } => {
                let mut scores = softmax_axis(&gates, -1, true)?;
                if let Some(g) = groups {
                    scores = g.mask(&scores, |s| Ok(s.max_axis(-1, true)?))?;
                }
                let inds = smallest_k(&scores.negative()?, *top_k)?;
                let picked = scores.take_along_axis(&inds, -1)?;
                Ok((inds, picked.multiply(Array::from_f32(*scaling))?))
            }
            Routing::Sigmoid { .. } => self.route_sigmoid(&gates),
        }
    }

    /// DeepSeek-V3's `group_expert_select`.
    fn route_sigmoid(&self, gates: &Array) -> Result<(Array, Array)> {
        let Routing::Sigmoid {
            top_k,
            groups,
            norm_topk_prob,
            scaling,
            correction,
        } = &self.routing
        else {
            return Err(Error::Internal("not a sigmoid router".into()));
        };
        let original = sigmoid(gates.as_dtype(Dtype::Float32)?)?;
        let mut scores = original.add(correction)?;
        if groups.count > 1 {
            scores = groups.mask(&scores, |s| Ok(topk_axis(s, 2, -1)?.sum_axis(-1, true)?))?;
        }
        let inds = smallest_k(&scores.negative()?, *top_k)?;
        let mut picked = original.take_along_axis(&inds, -1)?;
        if *top_k > 1 && *norm_topk_prob {
            picked = picked.divide(picked.sum_axis(-1, true)?)?;
        }
        Ok((inds, picked.multiply(Array::from_f32(*scaling))?))
    }
}

/// Indices of the `k` smallest entries along the last axis, as mlx-lm takes them.
fn smallest_k(x: &Array, k: i32) -> Result<Array> {
    Ok(argpartition_axis(x, k - 1, -1)?.index((.., .., ..k)))
}

/// A sparse MoE block: routed experts, optional always-on shared experts, and (tensor
/// parallel) one all_sum for both.
pub struct Moe {
    pub router: Router,
    pub experts: SwitchGlu,
    pub shared: Option<Mlp>,
    /// A gate on the shared experts: their output times `sigmoid(gate(x))` (Qwen3-Next's
    /// `shared_expert_gate`).
    pub shared_gate: Option<Linear>,
    /// Cast the weighted sum back to the experts' dtype (Qwen3-MoE, DeepSeek-V3).
    pub cast_sum: bool,
    pub tensor: Option<TensorCut>,
}

/// A mixture's sizes: what its checkpoint holds at `{mlp}.gate`, `{mlp}.switch_mlp` and
/// `{mlp}.shared_experts`.
#[derive(Debug, Clone, Copy)]
pub struct MoeSizes {
    pub hidden: i32,
    /// Each routed expert's neurons.
    pub inter: i32,
    pub experts: i32,
    /// Always-on experts, each `inter` wide (one MLP of their sum).
    pub shared: Option<i32>,
}

impl Moe {
    /// The mixture at `mlp` of `sizes`, routed by `routing`; `cast_sum` as mlx-lm's family does.
    pub fn load(
        w: &mut Weights,
        mlp: &str,
        (sizes, routing): (MoeSizes, Routing),
        cast_sum: bool,
        tensor: &Option<TensorCut>,
    ) -> Result<Moe> {
        let MoeSizes {
            hidden,
            inter,
            experts,
            shared,
        } = sizes;
        let shared = match shared {
            Some(n) => {
                let dims = (
                    hidden,
                    inter * positive("n_shared_experts", n, MAX_EXPERTS)?,
                );
                let prefix = format!("{mlp}.shared_experts");
                Some(Mlp::load(w, &prefix, dims, false, tensor)?)
            }
            None => None,
        };
        Ok(Moe {
            router: Router {
                gate: Linear::load(w, &format!("{mlp}.gate"), hidden, experts, false)?,
                routing,
            },
            experts: SwitchGlu::load(
                w,
                &format!("{mlp}.switch_mlp"),
                experts,
                (hidden, inter),
                tensor,
            )?,
            shared,
            shared_gate: None,
            cast_sum,
            tensor: tensor.clone(),
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let hidden = shape[shape.len() - 1];
        let (inds, scores) = self.router.route(x)?;
        let k = inds.shape()[inds.ndim() - 1];
        let y = self
            .experts
            .forward(&x.reshape(&[-1, hidden])?, &inds.reshape(&[-1, k])?)?;
        let y = y.reshape(&[shape[0], shape[1], k, hidden])?;
        let mut out = y.multiply(scores.expand_dims(-1)?)?.sum_axis(-2, false)?;
        if self.cast_sum {
            out = out.as_dtype(y.dtype())?;
        }
        if let Some(shared) = &self.shared {
            let mut partial = shared.forward_partial(x)?;
            if let Some(gate) = &self.shared_gate {
                partial = sigmoid(&gate.forward(x)?)?.multiply(partial)?;
            }
            out = out.add(partial)?;
        }
        TensorCut::all_sum(&self.tensor, out)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.router.gate.arrays();
        out.extend(self.experts.arrays());
        out.extend(self.shared.iter().flat_map(Mlp::arrays));
        out.extend(self.shared_gate.iter().flat_map(Linear::arrays));
        if let Routing::Sigmoid { correction, .. } = &self.router.routing {
            out.push(correction);
        }
        out
    }
}

/// Far above any released MoE (DeepSeek-V3 and Kimi K2: 256 and 384 experts).
pub const MAX_EXPERTS: i32 = 1 << 12;
