//! Per-layer KV cache that grows in steps, as mlx-lm's `KVCache`.

use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp};
use mlx_rs::ops::{concatenate, zeros_dtype};
use std::sync::Arc;

use mlx_rs::{Array, Dtype};

use crate::error::Result;

/// Positions are allocated this many at a time.
const STEP: i32 = 256;

#[derive(Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: i32,
    /// Shared by the caches that write these buffers ([`Self::prefix`] shares them): a step
    /// writes in place only where this cache is the one writer.
    writers: Arc<()>,
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
        self.reserve(keys.shape(), values.shape(), keys.dtype())?;
        self.offset += len;
        let (k, v) = (
            self.keys.as_mut().expect("allocated"),
            self.values.as_mut().expect("allocated"),
        );
        k.try_index_mut((.., .., prev..self.offset, ..), keys)?;
        v.try_index_mut((.., .., prev..self.offset, ..), values)?;
        // MLX's slice update writes in place only where nothing else holds the buffers.
        self.writers = Arc::new(());
        Ok(())
    }

    /// The whole key and value buffers, with room for one more position of `kv_heads` heads
    /// (keys `k_width` wide, values `v_width`), for a step that writes that position itself
    /// (`quant_cpu::layer`), and whether it may write them in place (no other cache writes
    /// them); hand the written buffers to [`Self::advance`].
    pub fn buffers_for_one(
        &mut self,
        kv_heads: i32,
        (k_width, v_width): (i32, i32),
        dtype: Dtype,
    ) -> Result<(Array, Array, bool)> {
        self.reserve(
            &[1, kv_heads, 1, k_width],
            &[1, kv_heads, 1, v_width],
            dtype,
        )?;
        let exclusive = Arc::strong_count(&self.writers) == 1;
        match (&self.keys, &self.values) {
            (Some(k), Some(v)) => Ok((k.clone(), v.clone(), exclusive)),
            _ => Err(crate::error::Error::Internal(
                "no KV buffers after reserving".into(),
            )),
        }
    }

    /// Takes the buffers a step wrote position `offset` into (from [`Self::buffers_for_one`]):
    /// its own copy where the old ones were shared, so this cache is their one writer.
    pub fn advance(&mut self, keys: Array, values: Array) {
        self.keys = Some(keys);
        self.values = Some(values);
        self.offset += 1;
        if Arc::strong_count(&self.writers) > 1 {
            self.writers = Arc::new(());
        }
    }

    /// Grows the buffers (in steps of [`STEP`] positions) to hold keys and values shaped
    /// `k_shape`/`v_shape` ([B, kv_heads, L, d]) after the cached positions.
    fn reserve(&mut self, k_shape: &[i32], v_shape: &[i32], dtype: Dtype) -> Result<()> {
        let prev = self.offset;
        let len = k_shape[2];
        let capacity = self.keys.as_ref().map_or(0, |k| k.shape()[2]);
        if self.keys.is_none() || prev + len > capacity {
            let steps = (STEP + len - 1) / STEP;
            let grow = |shape: &[i32], old: Option<&Array>| -> Result<Array> {
                let mut shape = shape.to_vec();
                shape[2] = steps * STEP;
                let fresh = zeros_dtype(&shape, dtype)?;
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
            self.keys = Some(grow(k_shape, self.keys.as_ref())?);
            self.values = Some(grow(v_shape, self.values.as_ref())?);
            self.writers = Arc::new(());
        }
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
            writers: self.writers.clone(),
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
