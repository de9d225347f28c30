//! Per-layer KV cache that grows in steps, as mlx-lm's `KVCache`.

use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp};
use mlx_rs::ops::{concatenate, zeros_dtype};
use mlx_rs::Array;

use crate::error::Result;

/// Positions are allocated this many at a time.
const STEP: i32 = 256;

#[derive(Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
}

impl KvCache {
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// How many positions are cached.
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// Appends `keys`/`values` ([B, kv_heads, L, head_dim]) and returns all cached so far.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        self.update(keys, values)?;
        self.fetch()
    }

    /// Appends `keys`/`values` ([B, kv_heads, L, head_dim]).
    pub fn update(&mut self, keys: &Array, values: &Array) -> Result<()> {
        let prev = self.offset;
        let len = keys.shape()[2];
        let capacity = self.keys.as_ref().map_or(0, |k| k.shape()[2]);
        if self.keys.is_none() || prev + len > capacity {
            let steps = (STEP + len - 1) / STEP;
            let grow = |x: &Array, old: Option<&Array>| -> Result<Array> {
                let mut shape = x.shape().to_vec();
                shape[2] = steps * STEP;
                let fresh = zeros_dtype(&shape, x.dtype())?;
                Ok(match old {
                    None => fresh,
                    Some(old) => {
                        let old = if prev % STEP != 0 {
                            old.index((.., .., ..prev, ..))
                        } else {
                            old.clone()
                        };
                        concatenate(&[old, fresh], 2)?
                    }
                })
            };
            self.keys = Some(grow(keys, self.keys.as_ref())?);
            self.values = Some(grow(values, self.values.as_ref())?);
        }
        self.offset += len;
        let (k, v) = (
            self.keys.as_mut().expect("allocated"),
            self.values.as_mut().expect("allocated"),
        );
        k.try_index_mut((.., .., prev..self.offset, ..), keys)?;
        v.try_index_mut((.., .., prev..self.offset, ..), values)?;
        Ok(())
    }

    /// The keys and values cached so far (positions `..offset`), as views of the buffers.
    pub fn fetch(&self) -> Result<(Array, Array)> {
        let len = self.offset;
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) => Ok((k.index((.., .., ..len, ..)), v.index((.., .., ..len, ..)))),
            _ => Err(crate::error::Error::Internal(
                "fetching from an empty KV cache".into(),
            )),
        }
    }

    /// The first `len` positions, sharing this cache's arrays: MLX copies them on the next
    /// write, so neither side ever sees the other's later positions.
    pub fn prefix(&self, len: usize) -> KvCache {
        KvCache {
            keys: self.keys.clone(),
            values: self.values.clone(),
            offset: self.offset.min(i32::try_from(len).unwrap_or(i32::MAX)),
        }
    }

    /// Bytes the cache holds (its whole allocation, not only the used positions).
    pub fn nbytes(&self) -> usize {
        self.keys
            .iter()
            .chain(self.values.iter())
            .map(Array::nbytes)
            .sum()
    }

    /// The cached arrays, to evaluate after prefill.
    pub fn state(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }

    /// Every cached array of every row (each row one cache per layer), to evaluate a step.
    pub fn states(rows: &[&mut [KvCache]]) -> Vec<Array> {
        rows.iter()
            .flat_map(|r| r.iter().flat_map(|c| c.state().into_iter().cloned()))
            .collect()
    }
}
