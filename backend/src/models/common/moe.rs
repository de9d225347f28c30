//! Mixture-of-experts feed-forward blocks, as mlx-lm's `SwitchGLU` and its families' routers
//! compute them: experts stacked in 3-D tensors, each token through its top-k experts.

use mlx_rs::ops::indexing::{topk_axis, IndexOp};
use mlx_rs::ops::{
    argpartition_axis, argsort_axis, broadcast_to, gather_mm, sigmoid, softmax_axis,
};
use mlx_rs::{Array, Dtype};

use super::shape::Activation;
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

/// Every expert's gated MLP (SwiGLU, or gpt-oss's clamped one with biases); tensor-parallel,
/// each expert's intermediate neurons are cut, or (expert parallel) each rank holds a range
/// of whole experts.
pub struct SwitchGlu {
    pub gate_proj: SwitchLinear,
    pub up_proj: SwitchLinear,
    pub down_proj: SwitchLinear,
    pub activation: Activation,
    /// Each expert's biases, where the checkpoint has them (gpt-oss).
    biases: Option<ExpertBiases>,
    /// The experts this rank holds, when it holds only some (expert parallelism).
    local: Option<LocalExperts>,
}

/// Stacked biases `[experts, out]` of the three projections, cut as their weights are (the
/// down projection's only on rank 0 when its inputs are cut).
struct ExpertBiases {
    gate: Array,
    up: Array,
    down: Option<Array>,
}

/// What a family's mixture is called and computes beyond mlx-lm's default `SwitchGLU`: the
/// router's and the experts' names under the MLP, whether they carry biases, and the gate.
#[derive(Debug, Clone, Copy)]
pub struct MoeLayout {
    pub router: &'static str,
    pub experts: &'static str,
    pub bias: bool,
    pub activation: Activation,
}

impl MoeLayout {
    /// `{mlp}.gate` and `{mlp}.switch_mlp`, no biases, SwiGLU (Qwen3-MoE, DeepSeek, GLM).
    pub const SWITCH_MLP: MoeLayout = MoeLayout {
        router: "gate",
        experts: "switch_mlp",
        bias: false,
        activation: Activation::SwiGlu,
    };
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
        (activation, bias): (Activation, bool),
        tensor: &Option<TensorCut>,
    ) -> Result<SwitchGlu> {
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
        let mut part = |name: &str, dims: (i32, i32), split: Cut| {
            SwitchLinear::load(w, &format!("{prefix}.{name}"), experts, dims, split)
        };
        let (gate_proj, up_proj) = (
            part("gate_proj", (hidden, inter), in_split)?,
            part("up_proj", (hidden, inter), in_split)?,
        );
        let down_proj = part("down_proj", (inter, hidden), out_split)?;
        let biases = match bias {
            true => {
                let mut b = |name: &str, out: i32, split: Cut| {
                    w.stacked_bias(&format!("{prefix}.{name}"), (experts, out), split)
                };
                let (gate, up) = (
                    b("gate_proj", inter, in_split)?,
                    b("up_proj", inter, in_split)?,
                );
                let down = b("down_proj", hidden, out_split)?;
                match (gate, up) {
                    (Some(gate), Some(up)) => Some(ExpertBiases { gate, up, down }),
                    _ => return Err(Error::Internal(format!("{prefix}: biases cut away"))),
                }
            }
            false => None,
        };
        Ok(SwitchGlu {
            gate_proj,
            up_proj,
            down_proj,
            activation,
            biases,
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
        // A biased expert's row is not zero for a zero weight row: mask it out too.
        let keep = inside.expand_dims(-1)?;
        if let SwitchLinear::Packed(_) = self.gate_proj {
            let idx = mlx_rs::ops::select(&inside, &shifted, Array::from_int(-1))?;
            return Ok((idx, self.biases.is_some().then_some(keep)));
        }
        let idx = mlx_rs::ops::select(&inside, &shifted, Array::from_int(0))?;
        Ok((idx.as_dtype(Dtype::Uint32)?, Some(keep)))
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

    /// Row r of `x` through expert `experts[r]`'s gated MLP, each projection plus the
    /// expert's bias where it has one (as mlx-lm's `SwitchLinear` adds `bias[indices]`).
    fn rows(&self, x: &Array, experts: &Array, sorted: bool) -> Result<Array> {
        // An index -1 (an expert another rank holds, packed) reads expert 0's bias; the row is
        // masked out afterwards.
        let bias_rows = match self.local {
            Some(_) => {
                mlx_rs::ops::maximum(experts, Array::from_int(0).as_dtype(experts.dtype())?)?
            }
            None => experts.clone(),
        };
        let biased = |y: Array, bias: Option<&Array>| -> Result<Array> {
            match bias {
                Some(b) => Ok(y.add(b.take_axis(&bias_rows, 0)?)?),
                None => Ok(y),
            }
        };
        let b = self.biases.as_ref();
        let up = biased(self.up_proj.forward(x, experts, sorted)?, b.map(|b| &b.up))?;
        let gate = biased(
            self.gate_proj.forward(x, experts, sorted)?,
            b.map(|b| &b.gate),
        )?;
        let h = match self.activation {
            Activation::ClampedSwiGlu => super::layers::clamped_swiglu(&gate, &up)?,
            Activation::GeGluTanh => super::layers::geglu_tanh(&gate, &up)?,
            Activation::SwiGlu => mlx_rs::nn::silu(gate)?.multiply(up)?,
        };
        let down = self.down_proj.forward(&h, experts, sorted)?;
        biased(down, b.and_then(|b| b.down.as_ref()))
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let biases = self.biases.iter().flat_map(|b| {
            [Some(&b.gate), Some(&b.up), b.down.as_ref()]
                .into_iter()
                .flatten()
        });
        [&self.gate_proj, &self.up_proj, &self.down_proj]
            .into_iter()
            .flat_map(SwitchLinear::arrays)
            .chain(biases)
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
    /// gpt-oss: the top k logits (of a router with a bias), softmaxed among themselves.
    TopLogits { top_k: i32 },
    /// DeepSeek-V3 (`noaux_tc`): sigmoid, selection biased by `e_score_correction_bias`
    /// within the best groups, weights from the unbiased scores, normalized and scaled.
    Sigmoid {
        top_k: i32,
        groups: Groups,
        norm_topk_prob: bool,
        scaling: f32,
        correction: Array,
    },
    /// MiniMax: the gate over f32 inputs, sigmoid, selection biased by the block's
    /// `e_score_correction_bias`, weights from the unbiased scores always normalized (over
    /// their sum plus 1e-20) and cast to the input's dtype; no groups, no scaling.
    SigmoidNormalized { top_k: i32, correction: Array },
    /// Mistral 4: softmax over f32 gates, selection within the best groups (ranked by their
    /// top-2 sum), weights from the unmasked scores, normalized (sum plus 1e-20) where
    /// `norm_topk_prob` says, and scaled.
    SoftmaxGroupsByTwo {
        top_k: i32,
        groups: Groups,
        norm_topk_prob: bool,
        scaling: f32,
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
        if let Routing::SigmoidNormalized { top_k, correction } = &self.routing {
            return self.route_normalized(x, *top_k, correction);
        }
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
            Routing::TopLogits { top_k } => {
                // mlx-lm's `mlx_topk`: argpartition at -k, the last k, their logits.
                let experts = gates.shape()[gates.ndim() - 1];
                let inds = argpartition_axis(&gates, experts - top_k, -1)?.index((
                    ..,
                    ..,
                    experts - top_k..,
                ));
                let picked = gates.take_along_axis(&inds, -1)?;
                Ok((inds, softmax_axis(&picked, -1, true)?))
            }
            Routing::Sigmoid { .. } => self.route_sigmoid(&gates),
            Routing::SigmoidNormalized { .. } => Err(Error::Internal(
                "a normalized sigmoid router is routed apart".into(),
            )),
            Routing::SoftmaxGroupsByTwo { .. } => self.route_softmax_by_two(&gates),
        }
    }

    /// Mistral 4's `mistral4_expert_select`, op for op.
    fn route_softmax_by_two(&self, gates: &Array) -> Result<(Array, Array)> {
        let Routing::SoftmaxGroupsByTwo {
            top_k,
            groups,
            norm_topk_prob,
            scaling,
        } = &self.routing
        else {
            return Err(Error::Internal("not a grouped softmax router".into()));
        };
        let scores = softmax_axis(gates.as_dtype(Dtype::Float32)?, -1, false)?;
        let choice = match groups.count > 1 {
            true => groups.mask(&scores, |s| Ok(topk_axis(s, 2, -1)?.sum_axis(-1, true)?))?,
            false => scores.clone(),
        };
        let inds = smallest_k(&choice.negative()?, *top_k)?;
        let mut picked = scores.take_along_axis(&inds, -1)?;
        if *norm_topk_prob {
            let total = picked.sum_axis(-1, true)?.add(Array::from_f32(1e-20))?;
            picked = picked.divide(&total)?;
        }
        Ok((inds, picked.multiply(Array::from_f32(*scaling))?))
    }

    /// MiniMax's router, op for op as its `MiniMaxSparseMoeBlock`.
    fn route_normalized(&self, x: &Array, k: i32, correction: &Array) -> Result<(Array, Array)> {
        let gates = self.gate.forward(&x.as_dtype(Dtype::Float32)?)?;
        let original = sigmoid(&gates)?;
        let inds = smallest_k(&original.add(correction)?.negative()?, k)?;
        let picked = original.take_along_axis(&inds, -1)?;
        let total = picked.sum_axis(-1, true)?.add(Array::from_f32(1e-20))?;
        Ok((inds, picked.divide(&total)?.as_dtype(x.dtype())?))
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
        let at = (mlp, MoeLayout::SWITCH_MLP);
        Moe::load_laid_out(w, at, (sizes, routing), cast_sum, tensor)
    }

    /// The mixture at `mlp` under a family's own `layout` (names, biases, gate).
    pub fn load_laid_out(
        w: &mut Weights,
        (mlp, layout): (&str, MoeLayout),
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
        let gate = format!("{mlp}.{}", layout.router);
        Ok(Moe {
            router: Router {
                gate: Linear::load(w, &gate, hidden, experts, layout.bias)?,
                routing,
            },
            experts: SwitchGlu::load(
                w,
                &format!("{mlp}.{}", layout.experts),
                experts,
                (hidden, inter),
                (layout.activation, layout.bias),
                tensor,
            )?,
            shared,
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
            out = out.add(shared.forward_partial(x)?)?;
        }
        TensorCut::all_sum(&self.tensor, out)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.router.gate.arrays();
        out.extend(self.experts.arrays());
        out.extend(self.shared.iter().flat_map(Mlp::arrays));
        if let Routing::Sigmoid { correction, .. } | Routing::SigmoidNormalized { correction, .. } =
            &self.router.routing
        {
            out.push(correction);
        }
        out
    }
}

/// Far above any released MoE (DeepSeek-V3 and Kimi K2: 256 and 384 experts).
pub const MAX_EXPERTS: i32 = 1 << 12;
