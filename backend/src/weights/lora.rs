//! LoRA updates taken by their linear layers, cut as the layers' weights are.

use super::cut::shard;
use super::{Cut, Weights};
use crate::error::{Error, Result};
use crate::lora::{LowRank, Merge, Updates};

impl Weights {
    /// The same weights with LoRA `updates` for their linear layers to take.
    pub fn with_updates(mut self, updates: Updates) -> Weights {
        self.updates = updates;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::WeightMode;
    use mlx_rs::ops::{concatenate, matmul};
    use mlx_rs::{random, Array};
    use std::collections::HashMap;

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
