//! A layer's cache of one sequence, whichever kind of layer: keys and values, or a recurrent
//! state. Everything outside the layers (sequences, the prefix cache, a worker's slots) holds
//! these and asks them the same questions: how far, cut back where, how many bytes.

use mlx_rs::Array;

use super::{KvCache, KvFormat, RecurrentState};
use crate::error::{Error, Result};

/// What one layer keeps for one sequence.
#[derive(Clone)]
pub enum LayerCache {
    /// An attention layer's keys and values.
    Kv(KvCache),
    /// A linear-attention layer's convolution inputs and recurrent state.
    Recurrent(RecurrentState),
}

/// The kind of cache a layer takes, to make fresh ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Keys and values; a sliding layer's window.
    Kv {
        window: Option<i32>,
    },
    Recurrent,
}

impl LayerCache {
    /// A fresh cache of `kind`, keys and values stored in `format`.
    pub fn new(format: KvFormat, kind: CacheKind) -> LayerCache {
        match kind {
            CacheKind::Kv { window } => LayerCache::Kv(KvCache::for_layer(format, window)),
            CacheKind::Recurrent => LayerCache::Recurrent(RecurrentState::new()),
        }
    }

    /// One sequence's caches, one per layer of `kinds`.
    pub fn for_layers(format: KvFormat, kinds: &[CacheKind]) -> Vec<LayerCache> {
        kinds.iter().map(|k| LayerCache::new(format, *k)).collect()
    }

    /// The keys and values, for an attention layer.
    pub fn kv(&mut self) -> Result<&mut KvCache> {
        match self {
            LayerCache::Kv(kv) => Ok(kv),
            LayerCache::Recurrent(_) => Err(wrong_kind("an attention", "a recurrent state")),
        }
    }

    /// The recurrent state, for a linear-attention layer.
    pub fn recurrent(&mut self) -> Result<&mut RecurrentState> {
        match self {
            LayerCache::Recurrent(r) => Ok(r),
            LayerCache::Kv(_) => Err(wrong_kind("a linear-attention", "keys and values")),
        }
    }

    /// How many positions the cache holds.
    pub fn offset(&self) -> i32 {
        match self {
            LayerCache::Kv(kv) => kv.offset(),
            LayerCache::Recurrent(r) => r.offset(),
        }
    }

    /// The first `len` positions, sharing arrays (see [`KvCache::prefix`] and
    /// [`RecurrentState::prefix`]: exact only where [`Self::can_cut_to`] says so).
    pub fn prefix(&self, len: usize) -> LayerCache {
        match self {
            LayerCache::Kv(kv) => LayerCache::Kv(kv.prefix(len)),
            LayerCache::Recurrent(r) => LayerCache::Recurrent(r.prefix(len)),
        }
    }

    /// Keeps only the first `len` positions.
    pub fn trim(&mut self, len: usize) {
        match self {
            LayerCache::Kv(kv) => kv.trim(len),
            LayerCache::Recurrent(r) => r.trim(len),
        }
    }

    /// Whether the cache can be cut back to its first `len` positions exactly.
    pub fn can_cut_to(&self, len: usize) -> bool {
        match self {
            LayerCache::Kv(kv) => kv.can_cut_to(len),
            LayerCache::Recurrent(r) => r.can_cut_to(len),
        }
    }

    /// The positions a recurrent state can be cut back to (`None`: keys and values, cut
    /// anywhere their window allows).
    pub fn cut_points(&self) -> Option<Vec<i32>> {
        match self {
            LayerCache::Kv(_) => None,
            LayerCache::Recurrent(r) => Some(r.cut_points()),
        }
    }

    /// Keeps what `other`, a cache of a sequence this one extends, can be cut back to and
    /// this one cannot (a recurrent state's checkpoints).
    pub fn adopt(&mut self, other: &LayerCache) {
        if let (LayerCache::Recurrent(mine), LayerCache::Recurrent(theirs)) = (self, other) {
            mine.adopt(theirs);
        }
    }

    /// Bytes the cache holds.
    pub fn nbytes(&self) -> usize {
        match self {
            LayerCache::Kv(kv) => kv.nbytes(),
            LayerCache::Recurrent(r) => r.nbytes(),
        }
    }

    /// The cached arrays, to evaluate after a step.
    pub fn state(&self) -> Vec<&Array> {
        match self {
            LayerCache::Kv(kv) => kv.state(),
            LayerCache::Recurrent(r) => r.held(),
        }
    }

    /// Every cached array of every row (each row one cache per layer), to evaluate a step.
    pub fn states(rows: &[&mut [LayerCache]]) -> Vec<Array> {
        rows.iter()
            .flat_map(|r| r.iter().flat_map(|c| c.state().into_iter().cloned()))
            .collect()
    }
}

fn wrong_kind(layer: &str, cache: &str) -> Error {
    Error::Internal(format!("{layer} layer was given {cache}"))
}
