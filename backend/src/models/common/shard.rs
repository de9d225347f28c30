//! Which part of the model one rank holds: a range of layers (pipeline) and/or a slice of
//! every layer's heads and neurons (tensor). A single node holds everything.

use std::ops::Range;
use std::rc::Rc;

use mlx_rs::Array;

use crate::distributed::Group;
use crate::error::{Error, Result};
use crate::weights::Cut;

#[derive(Clone)]
pub struct RankPart {
    /// The layers this rank holds; `None` is all of them.
    pub layers: Option<Range<usize>>,
    /// Whether this rank holds the embedding, final norm and output head (rank 0).
    pub ends: bool,
    pub tensor: Option<TensorCut>,
}

impl RankPart {
    /// The whole model, as on one node.
    pub fn full() -> RankPart {
        RankPart {
            layers: None,
            ends: true,
            tensor: None,
        }
    }

    pub fn holds_layer(&self, i: usize) -> bool {
        self.layers.as_ref().is_none_or(|r| r.contains(&i))
    }
}

/// This rank's slice in tensor parallelism, and the group its partial sums are summed over.
#[derive(Clone)]
pub struct TensorCut {
    pub rank: usize,
    pub size: usize,
    pub group: Rc<Group>,
    pub experts: ExpertCut,
}

/// How a tensor split cuts a mixture of experts' routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertCut {
    /// Every expert's intermediate neurons (`parallelism:tensor`, as mlx-lm's `shard`).
    Neurons,
    /// Whole experts, 1/size of them per rank (`parallelism:expert`).
    Whole,
}

impl TensorCut {
    /// How routed experts are cut, if the model is split at all.
    pub fn expert_cut(t: &Option<TensorCut>) -> Option<ExpertCut> {
        t.as_ref().map(|t| t.experts)
    }

    /// What the tensor check must divide for `experts` routed experts of `neurons` each:
    /// the neurons, or (whole experts per rank) the expert count.
    pub fn expert_count(t: &Option<TensorCut>, experts: i32, neurons: i32) -> (&'static str, i32) {
        match TensorCut::expert_cut(t) {
            Some(ExpertCut::Whole) => ("routed experts", experts),
            _ => ("expert neurons", neurons),
        }
    }
}

impl TensorCut {
    /// Sharded-to-all: sums every rank's partial output (a no-op without a tensor split).
    pub fn all_sum(split: &Option<TensorCut>, x: Array) -> Result<Array> {
        match split {
            Some(t) => Ok(t.group.all_sum(&x)?),
            None => Ok(x),
        }
    }

    /// Fails clearly unless every count divides by the number of ranks.
    pub fn check(&self, counts: &[(&str, i32)]) -> Result<()> {
        let n = self.size as i32;
        if counts.iter().all(|(_, c)| c % n == 0) {
            return Ok(());
        }
        let fits: Vec<String> = (1..=counts.iter().map(|c| c.1).min().unwrap_or(1))
            .filter(|d| counts.iter().all(|(_, c)| c % d == 0))
            .map(|d| d.to_string())
            .collect();
        let named: Vec<String> = counts
            .iter()
            .map(|(what, c)| format!("{c} {what}"))
            .collect();
        Err(Error::Config(format!(
            "tensor parallelism cannot split {} over {n} ranks; this model splits over {} ranks \
             (or use parallelism:pipeline)",
            named.join(", "),
            fits.join(", ")
        )))
    }
}

impl Cut {
    pub fn rows(t: &Option<TensorCut>) -> Cut {
        t.as_ref().map_or(Cut::Whole, |t| Cut::Rows {
            rank: t.rank,
            size: t.size,
        })
    }

    pub fn stacked(t: &Option<TensorCut>) -> Cut {
        t.as_ref().map_or(Cut::Whole, |t| Cut::Stacked {
            rank: t.rank,
            size: t.size,
        })
    }

    pub fn cols(t: &Option<TensorCut>) -> Cut {
        t.as_ref().map_or(Cut::Whole, |t| Cut::Cols {
            rank: t.rank,
            size: t.size,
        })
    }
}
