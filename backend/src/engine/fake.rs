//! A test-only model for the scheduler: greedy tokens that follow from the input ids, caches
//! that grow as a real model's do, and a log of every step, so the batch tests need no weights
//! and run in milliseconds.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use mlx_rs::ops::zeros;
use mlx_rs::{Array, Dtype};

use crate::cache::LayerCache;
use crate::distributed::protocol::CacheOp;
use crate::error::{Error, Result};
use crate::models::common::WeightStats;
use crate::models::{LanguageModel, Queueing, Row};
use crate::tokenizer::Tokenizer;

/// SmolLM2's vocabulary, so every id the fake picks is one the test tokenizer decodes.
pub const VOCAB: i32 = 49152;

/// The SmolLM2 fixture folder, found as integration-tests finds it. A missing fixture fails
/// the test: skipping would hide that nothing ran.
pub fn fixture_dir() -> PathBuf {
    let cache = match std::env::var_os("MLX_DIST_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/mlx-distributed"),
    };
    let dir = cache.join("fixtures/smollm2-135m-bf16");
    assert!(
        dir.is_dir(),
        "fixture {} is missing: run scripts/fetch-test-model",
        dir.display()
    );
    dir
}

/// The SmolLM2 tokenizer from the fixture folder.
pub fn tokenizer() -> &'static Arc<Tokenizer> {
    static TOK: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let tok = Tokenizer::load(&fixture_dir()).expect("the fixture's tokenizer loads");
        assert_eq!(tok.vocab_size(), VOCAB as usize, "the fake's vocab");
        Arc::new(tok)
    })
}

/// Layers, each with one KV head of dimension 1.
pub const LAYERS: usize = 2;

/// The fake's greedy choice after `id`: the argmax of its logits at that position.
pub fn next_token(id: u32) -> u32 {
    (id * 7 + 3) % VOCAB as u32
}

/// A row of a step as rank 0 plans it: its slot and its cache position before the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRow {
    pub slot: u64,
    pub offset: i32,
}

/// One call to the model, as a follower rank would receive it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The inputs' shape, [B, L].
    pub shape: Vec<i32>,
    /// Whether it came through `prefill` (a prompt chunk) rather than a decode step.
    pub prefill: bool,
    pub rows: Vec<StepRow>,
    pub cache_ops: Vec<CacheOp>,
    /// The step failed (see `FakeModel::fail_next`).
    pub failed: bool,
}

/// A `LanguageModel` without weights; see the module doc.
pub struct FakeModel {
    queueing: Queueing,
    log: RefCell<Vec<Call>>,
    next: Cell<Trouble>,
    in_prefill: Cell<bool>,
}

/// What goes wrong with the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    None,
    /// It fails as a lost rank would.
    Fail,
    /// It panics, as a bug in a model would.
    Panic,
}

impl FakeModel {
    pub fn new(queueing: Queueing) -> FakeModel {
        FakeModel {
            queueing,
            log: RefCell::new(Vec::new()),
            next: Cell::new(Trouble::None),
            in_prefill: Cell::new(false),
        }
    }

    /// Makes the next call fail, as a lost rank would (after it is logged, its ops lost).
    pub fn fail_next(&self) {
        self.next.set(Trouble::Fail);
    }

    /// The first call goes wrong so (for a model the test no longer holds).
    pub fn with_trouble(self, trouble: Trouble) -> FakeModel {
        self.next.set(trouble);
        self
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.log.borrow().clone()
    }

    /// The cache changes every successful call carried, in order.
    pub fn delivered_ops(&self) -> Vec<CacheOp> {
        let log = self.log.borrow();
        let ok = log.iter().filter(|c| !c.failed);
        ok.flat_map(|c| c.cache_ops.iter().copied()).collect()
    }
}

impl LanguageModel for FakeModel {
    fn forward_rows(
        &self,
        inputs: &Array,
        rows: &mut [Row],
        cache_ops: Vec<CacheOp>,
    ) -> Result<Array> {
        let shape = inputs.shape().to_vec();
        if shape.len() != 2 || shape[0] as usize != rows.len() {
            return Err(Error::Internal(format!(
                "fake model: inputs {shape:?} for {} rows",
                rows.len()
            )));
        }
        let trouble = self.next.replace(Trouble::None);
        let failed = trouble != Trouble::None;
        self.log.borrow_mut().push(Call {
            shape: shape.clone(),
            prefill: self.in_prefill.get(),
            rows: rows.iter().map(step_row).collect(),
            cache_ops,
            failed,
        });
        match trouble {
            Trouble::None => {}
            Trouble::Fail => return Err(Error::RankLost("fake model: rank 1 was lost".into())),
            Trouble::Panic => panic!("fake model: a step panicked"),
        }
        for row in rows.iter_mut() {
            extend(row.caches, shape[1])?;
        }
        logits(inputs)
    }

    fn prefill(&self, inputs: &Array, row: &mut Row, cache_ops: Vec<CacheOp>) -> Result<()> {
        self.in_prefill.set(true);
        let slot = row.slot;
        let caches = &mut *row.caches;
        let out = self.forward_rows(inputs, &mut [Row { slot, caches }], cache_ops);
        self.in_prefill.set(false);
        out?;
        Ok(mlx_rs::transforms::eval(
            row.caches.iter().flat_map(LayerCache::state),
        )?)
    }

    fn num_layers(&self) -> usize {
        LAYERS
    }

    /// Keys and values of one f32 element per layer, so budgets match the caches' bytes.
    fn kv_bytes_per_position(&self) -> usize {
        LAYERS * 2 * std::mem::size_of::<f32>()
    }

    fn weight_stats(&self) -> WeightStats {
        WeightStats::default()
    }

    fn queueing(&self) -> Queueing {
        self.queueing
    }
}

fn step_row(row: &Row) -> StepRow {
    StepRow {
        slot: row.slot,
        offset: row.caches.first().map_or(0, LayerCache::offset),
    }
}

/// Appends `len` positions to every layer's cache, through the same update a model uses.
fn extend(caches: &mut [LayerCache], len: i32) -> Result<()> {
    let kv = zeros::<f32>(&[1, 1, len, 1])?;
    for cache in caches {
        cache.kv()?.update(&kv, &kv)?;
    }
    Ok(())
}

/// Logits [B, L, VOCAB] (f32, lazy like a real model's) peaking at `next_token(id)` for
/// each input id.
fn logits(inputs: &Array) -> Result<Array> {
    let ids = inputs.as_dtype(Dtype::Int32)?;
    let best = ids
        .multiply(Array::from_int(7))?
        .add(Array::from_int(3))?
        .remainder(Array::from_int(VOCAB))?;
    let vocab = Array::arange::<i32, i32>(None, VOCAB, None)?;
    let hot = best.expand_dims(-1)?.eq(&vocab)?.as_dtype(Dtype::Float32)?;
    Ok(hot.multiply(Array::from_f32(8.0))?)
}

/// Replays the successful calls as a follower rank would (follower.rs: apply the ops, then
/// each row must find its slot at the offset rank 0 says), so a dropped, duplicated or
/// misordered cache change shows as the first call a follower would refuse.
pub fn replay(calls: &[Call]) -> std::result::Result<(), String> {
    let mut slots: HashMap<u64, i32> = HashMap::new();
    let mut saved: HashMap<u64, usize> = HashMap::new();
    for (n, call) in calls.iter().enumerate().filter(|(_, c)| !c.failed) {
        for op in &call.cache_ops {
            apply(op, &mut slots, &mut saved).map_err(|e| format!("call {n}: {op:?}: {e}"))?;
        }
        for row in &call.rows {
            let have = match row.offset {
                0 => 0,
                _ => slots.remove(&row.slot).unwrap_or(0),
            };
            if have != row.offset {
                return Err(format!(
                    "call {n}: slot {} is at {have}, rank 0 expects {}",
                    row.slot, row.offset
                ));
            }
            slots.insert(row.slot, row.offset + call.shape[1]);
        }
    }
    Ok(())
}

/// One cache change on a follower's slots (their positions) and entries (their lengths).
fn apply(
    op: &CacheOp,
    slots: &mut HashMap<u64, i32>,
    saved: &mut HashMap<u64, usize>,
) -> std::result::Result<(), String> {
    match *op {
        CacheOp::Save { slot, entry, len } => {
            let have = *slots.get(&slot).ok_or("the slot is not cached")?;
            if len > have as usize {
                return Err(format!("the slot holds only {have} positions"));
            }
            if saved.insert(entry, len).is_some() {
                return Err("the entry was saved before".into());
            }
        }
        CacheOp::Restore { slot, entry, len } => {
            let have = *saved.get(&entry).ok_or("the entry is not cached")?;
            if len > have {
                return Err(format!("the entry holds only {have} positions"));
            }
            slots.insert(slot, len as i32);
        }
        // A row may end before any step ran for it (max_tokens 0, a client gone early).
        CacheOp::Release { slot } => {
            slots.remove(&slot);
        }
        CacheOp::Evict { entry } => {
            saved.remove(&entry).ok_or("the entry is not cached")?;
        }
        CacheOp::Adopt { entry, from } => {
            let (new, old) = (saved.get(&entry), saved.get(&from));
            let (new, old) = (
                new.ok_or("the entry is not cached")?,
                old.ok_or("no entry to adopt")?,
            );
            if old > new {
                return Err("an entry adopts from one longer than itself".into());
            }
        }
        CacheOp::Trim { slot, len } => {
            let have = slots.get_mut(&slot).ok_or("the slot is not cached")?;
            if len > *have as usize {
                return Err(format!("the slot holds only {have} positions"));
            }
            *have = len as i32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(slot: u64, offset: i32, len: i32, cache_ops: Vec<CacheOp>) -> Call {
        Call {
            shape: vec![1, len],
            prefill: len > 1,
            rows: vec![StepRow { slot, offset }],
            cache_ops,
            failed: false,
        }
    }

    /// The checker the batch tests lean on must refuse what a follower would refuse.
    #[test]
    fn replay_refuses_a_dropped_or_misordered_cache_change() {
        let save = CacheOp::Save {
            slot: 1,
            entry: 1,
            len: 69,
        };
        let restore = CacheOp::Restore {
            slot: 2,
            entry: 1,
            len: 69,
        };
        let prefill = call(1, 0, 69, vec![]);
        let good = [
            prefill.clone(),
            call(1, 69, 1, vec![save]),
            call(2, 69, 1, vec![restore]),
        ];
        assert_eq!(replay(&good), Ok(()));
        let dropped = [
            prefill.clone(),
            call(1, 69, 1, vec![save]),
            call(2, 69, 1, vec![]),
        ];
        assert!(replay(&dropped).is_err(), "a lost Restore");
        let misordered = [prefill, call(2, 69, 1, vec![restore, save])];
        assert!(replay(&misordered).is_err(), "a Restore before its Save");
    }
}
