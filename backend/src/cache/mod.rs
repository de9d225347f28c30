//! What a layer keeps of each sequence ([`LayerCache`]): an attention layer's KV cache that
//! grows in steps, as mlx-lm's `KVCache`, stored as its [`KvFormat`] says (as computed, cast,
//! or quantized like mlx-lm's `QuantizedKVCache`), or a linear-attention layer's recurrent
//! state ([`RecurrentState`]).

mod format;
mod layer;
mod recurrent;

pub use format::{KvEncoding, KvFloat, KvFormat, CACHE_TYPES};
pub use layer::{CacheKind, LayerCache};
pub use recurrent::{Checkpoint, RecurrentState, CHECKPOINT_EVERY};

use mlx_rs::ops::indexing::{IndexOp, TryIndexMutOp};
use mlx_rs::ops::{concatenate, quantize, zeros_dtype};
use std::sync::Arc;

use mlx_rs::{Array, Dtype};

use crate::error::{Error, Result};

/// Positions are allocated this many at a time.
pub const STEP: i32 = 256;

/// The most positions one step may take back (a speculative step's proposals and its input;
/// `speculative` checks its bound against this): what a sliding-window cache keeps beyond its
/// window, so that trimming it is always exact.
pub const MAX_ROLLBACK: i32 = 33;
const WINDOW_SLACK: i32 = MAX_ROLLBACK;

/// The positions a cache of `window` lets go of before it writes at `offset`: whole steps,
/// and never one that the write (which sees back `window - 1`) or a trim by up to
/// [`WINDOW_SLACK`] needs. A function of the offset alone, so every rank can tell what any
/// rank's sliding layers still hold: a cache that holds `offset` has let go of at most this.
pub fn window_dropped(window: i32, offset: i32) -> i32 {
    (offset - (window - 1) - WINDOW_SLACK).max(0) / STEP * STEP
}

/// Whether a cache of `window` that held `held_to` positions still has what a sequence
/// resumed at its first `len` needs (the `window - 1` before `len`): a stored prefix is
/// reused only where this holds, never approximated.
pub fn window_keeps(window: i32, held_to: usize, len: usize) -> bool {
    let held_to = i32::try_from(held_to).unwrap_or(i32::MAX);
    let len = i32::try_from(len).unwrap_or(i32::MAX);
    (len - (window - 1)).max(0) >= window_dropped(window, held_to)
}

/// The most positions a cache of `window` allocates at once when prompts are prefilled
/// `chunk` at a time: the window, the slack, a step not yet let go, the chunk and its
/// allocation step. What the KV budget counts for a sliding layer.
pub fn window_capacity(window: i32, chunk: usize) -> usize {
    let fixed = i64::from(window) - 1 + i64::from(WINDOW_SLACK) + 2 * i64::from(STEP);
    usize::try_from(fixed)
        .unwrap_or(usize::MAX)
        .saturating_add(chunk)
}

/// One side's buffers ([B, kv_heads, capacity, width] each): one array, or MLX's quantized
/// codes, scales and biases.
type Parts = Vec<Array>;

/// How one part is allocated: its shape ([B, kv_heads, L, width]) and dtype.
type Layout = (Vec<i32>, Dtype);

fn layouts(parts: &[Array]) -> Vec<Layout> {
    parts
        .iter()
        .map(|p| (p.shape().to_vec(), p.dtype()))
        .collect()
}

/// Where a cache with a quantized format is: full precision until `quantized_start` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    FullPrecision,
    Encoded,
}

/// One side of the cache as read: dense (in the dtype it was computed in), or quantized.
pub enum Stored {
    Dense(Array),
    Affine {
        codes: Array,
        scales: Array,
        biases: Array,
        bits: i32,
        group_size: i32,
    },
}

#[derive(Clone)]
pub struct KvCache {
    format: KvFormat,
    stage: Stage,
    keys: Parts,
    values: Parts,
    /// The dtype keys and values were computed in (what a float encoding is read back as).
    computed: Option<Dtype>,
    offset: i32,
    /// A sliding layer's window: it keeps what the next step can see, not every position.
    window: Option<i32>,
    /// Positions let go from the front (a sliding layer's): buffer index 0 is this position.
    dropped: i32,
    /// Positions the last write appended: a sliding layer's read sees `window - 1` before them.
    last_write: i32,
    /// Shared by the caches that write these buffers ([`Self::prefix`] shares them): a step
    /// writes in place only where this cache is the one writer.
    writers: Arc<()>,
}

impl Default for KvCache {
    fn default() -> KvCache {
        KvCache::with_format(KvFormat::default())
    }
}

impl KvCache {
    pub fn new() -> KvCache {
        KvCache::default()
    }

    pub fn with_format(format: KvFormat) -> KvCache {
        let stage = match format.quantizes() && format.quantized_start > 0 {
            true => Stage::FullPrecision,
            false => Stage::Encoded,
        };
        KvCache {
            format,
            stage,
            keys: Vec::new(),
            values: Vec::new(),
            computed: None,
            offset: 0,
            window: None,
            dropped: 0,
            last_write: 0,
            writers: Arc::new(()),
        }
    }

    /// A cache for a layer that attends over the last `window` positions (a sliding layer)
    /// or over all of them (`None`).
    pub fn for_layer(format: KvFormat, window: Option<i32>) -> KvCache {
        KvCache {
            window,
            ..KvCache::with_format(format)
        }
    }

    /// One sequence's caches, one per layer of `windows` (each layer's window, if it slides).
    pub fn for_layers(format: KvFormat, windows: &[Option<i32>]) -> Vec<KvCache> {
        windows
            .iter()
            .map(|w| KvCache::for_layer(format, *w))
            .collect()
    }

    /// The window this cache keeps, for a sliding layer.
    pub fn window(&self) -> Option<i32> {
        self.window
    }

    /// Positions in the buffers: from `dropped` to `offset`.
    fn held(&self) -> i32 {
        self.offset - self.dropped
    }

    /// How many positions are cached.
    pub fn offset(&self) -> i32 {
        self.offset
    }

    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Stored as computed, both sides: what the fused CPU decode step writes in place.
    pub fn is_plain(&self) -> bool {
        self.format.is_plain()
    }

    /// Whether a side is held quantized now (attention then reads it through
    /// `quantized_matmul`).
    pub fn holds_quantized(&self) -> bool {
        self.format.quantizes() && self.stage == Stage::Encoded
    }

    /// Appends `keys`/`values` ([B, kv_heads, L, head_dim]) and returns all cached so far.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> Result<(Array, Array)> {
        self.update(keys, values)?;
        self.fetch()
    }

    /// Appends `keys`/`values` ([B, kv_heads, L, head_dim]).
    pub fn update(&mut self, keys: &Array, values: &Array) -> Result<()> {
        self.maybe_quantize()?;
        self.computed = Some(keys.dtype());
        let keys = self.encode(self.encoding(self.format.keys), keys)?;
        let values = self.encode(self.encoding(self.format.values), values)?;
        let len = keys[0].shape()[2];
        self.let_go();
        self.reserve(&layouts(&keys), &layouts(&values))?;
        let prev = self.held();
        self.offset += len;
        self.last_write = len;
        let end = self.held();
        let written = self.keys.iter_mut().zip(&keys);
        for (part, new) in written.chain(self.values.iter_mut().zip(&values)) {
            part.try_index_mut((.., .., prev..end, ..), new)?;
        }
        // MLX's slice update writes in place only where nothing else holds the buffers.
        self.writers = Arc::new(());
        Ok(())
    }

    /// A sliding layer's cache lets go of the front positions that neither the next write
    /// (which sees the `window - 1` before it) nor a rollback needs ([`window_dropped`] at
    /// its offset): the buffers keep the rest, copied to the front.
    fn let_go(&mut self) {
        let Some(window) = self.window else {
            return;
        };
        let dropped = window_dropped(window, self.offset);
        if dropped <= self.dropped {
            return;
        }
        let (from, to) = (dropped - self.dropped, self.held());
        let keep = |parts: &Parts| -> Parts {
            parts
                .iter()
                .map(|p| p.index((.., .., from..to, ..)))
                .collect()
        };
        self.keys = keep(&self.keys);
        self.values = keep(&self.values);
        self.dropped = dropped;
        self.writers = Arc::new(());
    }

    /// The encoding a side is written in now: full precision before the cache is quantized.
    fn encoding(&self, target: KvEncoding) -> KvEncoding {
        match (target, self.stage) {
            (KvEncoding::Affine { .. }, Stage::FullPrecision) => KvEncoding::AsComputed,
            _ => target,
        }
    }

    fn encode(&self, encoding: KvEncoding, x: &Array) -> Result<Parts> {
        Ok(match encoding {
            KvEncoding::AsComputed => vec![x.clone()],
            KvEncoding::Float(f) => vec![x.as_dtype(f.dtype())?],
            KvEncoding::Affine { bits } => {
                let (codes, scales, biases) = quantize(x, self.format.group_size, bits)?;
                vec![codes, scales, biases]
            }
        })
    }

    /// Quantizes what is cached once `quantized_start` positions are (mlx-lm's
    /// `maybe_quantize_kv_cache` after a forward pass; here before the next one, same offset).
    fn maybe_quantize(&mut self) -> Result<()> {
        let start = i32::try_from(self.format.quantized_start).unwrap_or(i32::MAX);
        if self.stage == Stage::Encoded || self.offset == 0 || self.offset < start {
            return Ok(());
        }
        let (keys, values) = self.fetch()?;
        self.stage = Stage::Encoded;
        let (keys, values) = (
            self.encode(self.format.keys, &keys)?,
            self.encode(self.format.values, &values)?,
        );
        self.keys = keys;
        self.values = values;
        self.writers = Arc::new(());
        Ok(())
    }

    /// The whole key and value buffers, with room for `positions` more positions of
    /// `kv_heads` heads (keys `k_width` wide, values `v_width`), for a step that writes them
    /// itself (`quant_cpu::layer`; plain caches only), and whether it may write them in place
    /// (no other cache writes them); hand the written buffers to [`Self::advance`].
    pub fn buffers_for(
        &mut self,
        positions: i32,
        kv_heads: i32,
        (k_width, v_width): (i32, i32),
        dtype: Dtype,
    ) -> Result<(Array, Array, bool)> {
        if !self.is_plain() || self.window.is_some() {
            return Err(Error::Internal(
                "the one-node step needs a plain cache of every position".into(),
            ));
        }
        self.reserve(
            &[(vec![1, kv_heads, positions, k_width], dtype)],
            &[(vec![1, kv_heads, positions, v_width], dtype)],
        )?;
        self.computed = Some(dtype);
        let exclusive = Arc::strong_count(&self.writers) == 1;
        match (self.keys.first(), self.values.first()) {
            (Some(k), Some(v)) => Ok((k.clone(), v.clone(), exclusive)),
            _ => Err(Error::Internal("no KV buffers after reserving".into())),
        }
    }

    /// Takes the buffers a step wrote `positions` positions from `offset` into (from
    /// [`Self::buffers_for`]): its own copy where the old ones were shared, so this cache is
    /// their one writer.
    pub fn advance(&mut self, positions: i32, keys: Array, values: Array) {
        self.keys = vec![keys];
        self.values = vec![values];
        self.offset += positions;
        if Arc::strong_count(&self.writers) > 1 {
            self.writers = Arc::new(());
        }
    }

    /// Grows the buffers (in steps of [`STEP`] positions) to hold parts laid out as `keys`/
    /// `values` (as encoded, [B, kv_heads, L, width] each) after the cached positions.
    fn reserve(&mut self, keys: &[Layout], values: &[Layout]) -> Result<()> {
        let Some((first, _)) = keys.first() else {
            return Err(Error::Internal("reserving no KV parts".into()));
        };
        let (prev, len) = (self.held(), first[2]);
        let capacity = self.keys.first().map_or(0, |k| k.shape()[2]);
        if self.keys.len() == keys.len() && prev + len <= capacity {
            return Ok(());
        }
        let steps = (STEP + len - 1) / STEP;
        let grow = |(shape, dtype): &Layout, old: Option<&Array>| -> Result<Array> {
            let mut shape = shape.clone();
            shape[2] = steps * STEP;
            let fresh = zeros_dtype(&shape, *dtype)?;
            Ok(match old {
                None => fresh,
                Some(old) => {
                    let old = match prev % STEP {
                        0 => old.clone(),
                        _ => old.index((.., .., ..prev, ..)),
                    };
                    concatenate(&[old, fresh], 2)?
                }
            })
        };
        let grow_all = |new: &[Layout], old: &Parts| -> Result<Parts> {
            new.iter()
                .enumerate()
                .map(|(i, n)| grow(n, old.get(i)))
                .collect()
        };
        self.keys = grow_all(keys, &self.keys)?;
        self.values = grow_all(values, &self.values)?;
        self.writers = Arc::new(());
        Ok(())
    }

    /// The keys and values cached so far (positions `..offset`; a sliding layer's last write
    /// and the `window - 1` before it), dense: views of the buffers,
    /// cast back where the format casts. A quantized side is an error; read it with
    /// [`Self::fetch_stored`].
    pub fn fetch(&self) -> Result<(Array, Array)> {
        match self.fetch_stored()? {
            (Stored::Dense(k), Stored::Dense(v)) => Ok((k, v)),
            _ => Err(Error::Internal("a quantized KV cache read as dense".into())),
        }
    }

    /// Each side cached so far (positions `..offset`) as stored.
    pub fn fetch_stored(&self) -> Result<(Stored, Stored)> {
        let (Some(computed), false) = (self.computed, self.keys.is_empty()) else {
            return Err(Error::Internal("fetching from an empty KV cache".into()));
        };
        let (start, end) = self.visible();
        let read = |parts: &Parts, target: KvEncoding| -> Result<Stored> {
            let view: Vec<Array> = parts
                .iter()
                .map(|p| p.index((.., .., start..end, ..)))
                .collect();
            Ok(
                match (self.encoding(target), <[Array; 3]>::try_from(view)) {
                    (KvEncoding::Affine { bits }, Ok([codes, scales, biases])) => Stored::Affine {
                        codes,
                        scales,
                        biases,
                        bits,
                        group_size: self.format.group_size,
                    },
                    (KvEncoding::Float(_), Err(mut one)) if one.len() == 1 => {
                        Stored::Dense(one.remove(0).as_dtype(computed)?)
                    }
                    (KvEncoding::AsComputed, Err(mut one)) if one.len() == 1 => {
                        Stored::Dense(one.remove(0))
                    }
                    _ => return Err(Error::Internal("KV parts do not match the format".into())),
                },
            )
        };
        Ok((
            read(&self.keys, self.format.keys)?,
            read(&self.values, self.format.values)?,
        ))
    }

    /// The buffer range a read sees: every held position, or a sliding layer's last write and
    /// the `window - 1` positions before it (mlx-lm's rotating cache holds the same).
    fn visible(&self) -> (i32, i32) {
        let end = self.held();
        match self.window {
            None => (0, end),
            Some(w) => ((end - (w - 1 + self.last_write)).max(0), end),
        }
    }

    /// The first `len` positions, sharing this cache's arrays: MLX copies them on the next
    /// write, so neither side ever sees the other's later positions.
    pub fn prefix(&self, len: usize) -> KvCache {
        let mut prefix = KvCache {
            offset: self.offset.min(i32::try_from(len).unwrap_or(i32::MAX)),
            ..self.clone()
        };
        prefix.keep_held();
        prefix
    }

    /// Keeps only the first `len` positions (mlx-lm's `trim`): the next write goes over the
    /// rest, which nothing reads before.
    pub fn trim(&mut self, len: usize) {
        self.offset = self.offset.min(i32::try_from(len).unwrap_or(i32::MAX));
        self.keep_held();
    }

    /// Whether this cache can be cut back to its first `len` positions exactly: always, unless
    /// a sliding layer has let go of what the next step after `len` would see.
    pub fn can_cut_to(&self, len: usize) -> bool {
        let len = i32::try_from(len).unwrap_or(i32::MAX);
        match self.window {
            None => true,
            Some(w) => (len.min(self.offset) - (w - 1)).max(0) >= self.dropped,
        }
    }

    /// A cut below what a sliding layer holds is a caller's bug ([`Self::can_cut_to`] says
    /// beforehand); it is logged, and the cache keeps the positions it has.
    fn keep_held(&mut self) {
        if self.offset < self.dropped {
            tracing::error!(
                offset = self.offset,
                dropped = self.dropped,
                "a sliding-window cache was cut below the positions it holds"
            );
            self.offset = self.dropped;
        }
    }

    /// Bytes the cache holds (its whole allocation, not only the used positions).
    pub fn nbytes(&self) -> usize {
        self.state().into_iter().map(Array::nbytes).sum()
    }

    /// The cached arrays, to evaluate after prefill.
    pub fn state(&self) -> Vec<&Array> {
        self.keys.iter().chain(self.values.iter()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::ops::dequantize;

    fn q8(start: u32) -> KvFormat {
        KvFormat {
            keys: KvEncoding::Affine { bits: 8 },
            values: KvEncoding::Affine { bits: 8 },
            group_size: 32,
            quantized_start: start,
        }
    }

    fn positions(len: i32, seed: f32) -> Array {
        let n = 2 * len * 64;
        let x: Vec<f32> = (0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect();
        Array::from_slice(&x, &[1, 2, len, 64])
    }

    #[test]
    fn a_quantized_cache_holds_mlx_quantize_of_every_position() -> Result<()> {
        let mut cache = KvCache::with_format(q8(0));
        let (a, b) = (positions(3, 0.0), positions(2, 9.0));
        cache.update(&a, &a)?;
        cache.update(&b, &b)?;
        assert!(cache.holds_quantized());
        assert_eq!(cache.offset(), 5);
        let Stored::Affine {
            codes,
            scales,
            biases,
            ..
        } = cache.fetch_stored()?.0
        else {
            panic!("keys not quantized");
        };
        let all = concatenate(&[a, b], 2)?;
        let (want, _, _) = quantize(&all, 32, 8)?;
        assert!(codes.eq_values(&want)?);
        let back = dequantize(&codes, &scales, &biases, 32, 8)?;
        assert!(back.subtract(&all)?.abs()?.max(None)?.item_exact::<f32>() < 0.01);
        Ok(())
    }

    #[test]
    fn quantizing_starts_where_the_format_says() -> Result<()> {
        let mut cache = KvCache::with_format(q8(4));
        cache.update(&positions(3, 0.0), &positions(3, 0.0))?;
        assert!(!cache.holds_quantized(), "3 positions < quantized_start 4");
        assert!(cache.fetch().is_ok());
        cache.update(&positions(1, 1.0), &positions(1, 1.0))?;
        assert!(!cache.holds_quantized(), "checked before a write, at 3");
        cache.update(&positions(1, 2.0), &positions(1, 2.0))?;
        assert!(cache.holds_quantized());
        assert!(cache.fetch().is_err(), "codes are not read as dense");
        // A prefix shares the codes and keeps its own length.
        let head = cache.prefix(2);
        assert_eq!((head.offset(), head.holds_quantized()), (2, true));
        Ok(())
    }

    #[test]
    fn a_cast_cache_stores_half_and_reads_back_the_computed_dtype() -> Result<()> {
        let f16 = KvFormat {
            keys: KvEncoding::Float(KvFloat::F16),
            values: KvEncoding::Float(KvFloat::F16),
            ..KvFormat::default()
        };
        let (mut half, mut full) = (KvCache::with_format(f16), KvCache::new());
        let x = positions(3, 0.0);
        let (k, _) = half.update_and_fetch(&x, &x)?;
        full.update(&x, &x)?;
        assert_eq!(k.dtype(), Dtype::Float32);
        assert!(k.subtract(&x)?.abs()?.max(None)?.item_exact::<f32>() < 1e-3);
        assert_eq!(2 * half.nbytes(), full.nbytes());
        Ok(())
    }

    /// A sliding cache (window 4) reads its last write and the 3 positions before it, lets
    /// go of its front in whole steps as it grows, and trims back by a speculative step
    /// exactly.
    #[test]
    fn a_window_cache_keeps_what_the_next_step_sees() -> Result<()> {
        let mut cache = KvCache::for_layer(KvFormat::default(), Some(4));
        let read = |cache: &mut KvCache, from: i32, len: i32| -> Result<Vec<f32>> {
            let x: Vec<f32> = (from..from + len).map(|p| p as f32).collect();
            let x = Array::from_slice(&x, &[1, 1, len, 1]);
            let (k, _) = cache.update_and_fetch(&x, &x)?;
            k.eval()?;
            Ok(k.as_slice::<f32>().to_vec())
        };
        assert_eq!(read(&mut cache, 0, 6)?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(read(&mut cache, 6, 1)?, [3.0, 4.0, 5.0, 6.0]);
        assert_eq!(read(&mut cache, 7, 3)?, [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let mut at = 10;
        while at < 700 {
            read(&mut cache, at, 50)?;
            at += 50;
        }
        assert_eq!(cache.dropped, window_dropped(4, 700));
        assert!(cache.held() < 4 - 1 + MAX_ROLLBACK + STEP + 50);
        assert!(cache.nbytes() <= window_capacity(4, 50) * 2 * 4);
        // A speculative step takes back at most MAX_ROLLBACK positions: always exact.
        assert!(cache.can_cut_to(700 - MAX_ROLLBACK as usize));
        cache.trim(690);
        assert_eq!(read(&mut cache, 690, 1)?, [687.0, 688.0, 689.0, 690.0]);
        assert!(!cache.can_cut_to(100));
        Ok(())
    }
}
