//! Rank 0's prefix cache: an LRU of KV states keyed by the tokens they hold. A new request
//! reuses the longest cached prefix of its prompt and prefills only the rest. Entries have ids
//! that rank 0 hands to the other ranks, which keep their own layers' KV under the same ids.

use serde::Serialize;

use crate::cache::LayerCache;

/// One cached state: the tokens whose keys and values `caches` hold (one cache per layer).
struct Entry {
    id: u64,
    tokens: Vec<u32>,
    /// Positions the caches held when they were stored (a sliding layer's have let go of
    /// the front by then: `cache::window_dropped`).
    held_to: usize,
    caches: Vec<LayerCache>,
    bytes: usize,
    used: u64,
}

/// A reusable prefix: entry `entry`'s first `len` positions, as caches a sequence may extend.
pub struct Hit {
    pub entry: u64,
    pub len: usize,
    pub caches: Vec<LayerCache>,
}

/// Counters for Status and GetMetrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens that were not prefilled because a cached prefix held them.
    pub reused_tokens: u64,
    pub entries: usize,
    pub bytes: usize,
}

/// What an insertion did: the new entry's id (None when an entry already covers the tokens)
/// and the entries it replaced.
pub struct Inserted {
    pub id: Option<u64>,
    pub evicted: Vec<u64>,
    /// The evicted entries the new one covers (a prefix of its tokens), whose cut points it
    /// adopted.
    pub covered: Vec<u64>,
}

#[derive(Default)]
pub struct PrefixCache {
    entries: Vec<Entry>,
    max_entries: usize,
    /// The windows of the model's sliding layers: a prefix is reused only where every one of
    /// them still holds what the rest of the prompt sees.
    windows: Vec<i32>,
    next_id: u64,
    clock: u64,
    stats: CacheStats,
}

impl PrefixCache {
    /// A cache of at most `max_entries` states (0 turns it off).
    pub fn new(max_entries: usize) -> PrefixCache {
        PrefixCache {
            max_entries,
            ..PrefixCache::default()
        }
    }

    /// The same cache for a model whose sliding layers have `windows`.
    pub fn with_windows(self, windows: Vec<i32>) -> PrefixCache {
        PrefixCache { windows, ..self }
    }

    pub fn enabled(&self) -> bool {
        self.max_entries > 0
    }

    /// The longest cached prefix of `prompt` that leaves its last token to be fed (the first
    /// decode step's input); counts a hit or a miss.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Hit> {
        if !self.enabled() {
            return None;
        }
        let usable = prompt.len().saturating_sub(1);
        let windows = &self.windows;
        let keeps = |e: &Entry, len: usize| {
            (windows.iter()).all(|w| crate::cache::window_keeps(*w, e.held_to, len))
        };
        let best = self
            .entries
            .iter_mut()
            .filter_map(|e| {
                Some((
                    resumable(e, common_prefix(&e.tokens, &prompt[..usable]))?,
                    e,
                ))
            })
            .filter(|(len, e)| *len > 0 && keeps(e, *len))
            .max_by_key(|(len, e)| (*len, e.used));
        let Some((len, entry)) = best else {
            self.stats.misses += 1;
            return None;
        };
        self.clock += 1;
        entry.used = self.clock;
        self.stats.hits += 1;
        self.stats.reused_tokens += len as u64;
        Some(Hit {
            entry: entry.id,
            len,
            caches: entry.caches.iter().map(|c| c.prefix(len)).collect(),
        })
    }

    /// Keeps `caches` (sharing their arrays) under `tokens`. Entries that hold a prefix of
    /// `tokens` are replaced; the least recently used go past `max_entries`.
    pub fn insert(&mut self, tokens: &[u32], caches: &[LayerCache]) -> Inserted {
        let mut evicted = Vec::new();
        if !self.enabled() || tokens.is_empty() {
            return Inserted {
                id: None,
                evicted,
                covered: Vec::new(),
            };
        }
        self.clock += 1;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.tokens.starts_with(tokens))
        {
            e.used = self.clock;
            return Inserted {
                id: None,
                evicted,
                covered: Vec::new(),
            };
        }
        let held_to = caches.first().map_or(0, |c| c.offset().max(0) as usize);
        let mut caches: Vec<LayerCache> = caches.iter().map(|c| c.prefix(tokens.len())).collect();
        self.entries.retain(|e| {
            let covered = tokens.starts_with(&e.tokens);
            if covered {
                evicted.push(e.id);
                // Its cut points stay reachable through the entry that covers it.
                caches
                    .iter_mut()
                    .zip(&e.caches)
                    .for_each(|(c, old)| c.adopt(old));
            }
            !covered
        });
        let covered = evicted.clone();
        self.next_id += 1;
        self.entries.push(Entry {
            id: self.next_id,
            tokens: tokens.to_vec(),
            held_to,
            bytes: caches.iter().map(LayerCache::nbytes).sum(),
            caches,
            used: self.clock,
        });
        while self.entries.len() > self.max_entries {
            evicted.extend(self.evict_lru());
        }
        Inserted {
            id: Some(self.next_id),
            evicted,
            covered,
        }
    }

    /// Drops the least recently used entry; its id, or None when the cache is empty.
    pub fn evict_lru(&mut self) -> Option<u64> {
        let (i, _) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.used)?;
        Some(self.entries.remove(i).id)
    }

    /// Drops every entry; their ids.
    pub fn clear(&mut self) -> Vec<u64> {
        self.entries.drain(..).map(|e| e.id).collect()
    }

    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            bytes: self.bytes(),
            ..self.stats.clone()
        }
    }
}

/// The longest of an entry's first `common` positions it can resume from exactly: all of them,
/// or (a model with recurrent states) its last cut point within them.
fn resumable(e: &Entry, common: usize) -> Option<usize> {
    let Some(points) = e.caches.iter().find_map(LayerCache::cut_points) else {
        return Some(common);
    };
    (points.into_iter())
        .filter_map(|p| usize::try_from(p).ok())
        .filter(|p| *p <= common && e.caches.iter().all(|c| c.can_cut_to(*p)))
        .max()
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::Array;

    /// One layer's cache holding `tokens` positions whose keys are the token ids.
    fn caches_for(tokens: &[u32]) -> Vec<LayerCache> {
        let mut c = LayerCache::Kv(crate::cache::KvCache::new());
        let n = tokens.len() as i32;
        let k = Array::from_slice(tokens, &[1, 1, n, 1]).as_dtype(mlx_rs::Dtype::Float32);
        let k = k.unwrap();
        c.kv().unwrap().update_and_fetch(&k, &k).unwrap();
        vec![c]
    }

    fn keys(c: &mut LayerCache, next: u32) -> Vec<f32> {
        let x = Array::from_slice(&[next as f32], &[1, 1, 1, 1]);
        let (k, _) = c.kv().unwrap().update_and_fetch(&x, &x).unwrap();
        k.eval().unwrap();
        k.as_slice::<f32>().to_vec()
    }

    #[test]
    fn longest_prefix_wins_and_leaves_the_last_token() {
        let mut cache = PrefixCache::new(4);
        cache.insert(&[1, 2, 3], &caches_for(&[1, 2, 3]));
        cache.insert(&[1, 2, 9, 9, 9], &caches_for(&[1, 2, 9, 9, 9]));
        let hit = cache.lookup(&[1, 2, 9, 9, 9]).unwrap();
        assert_eq!(hit.len, 4, "the whole prompt but its last token");
        let hit = cache.lookup(&[1, 2, 3, 4]).unwrap();
        assert_eq!((hit.entry, hit.len), (1, 3));
        assert!(cache.lookup(&[7, 1, 2]).is_none());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.reused_tokens, s.entries), (2, 1, 7, 2));
    }

    #[test]
    fn a_trimmed_hit_never_sees_the_entry_s_later_positions() {
        let mut cache = PrefixCache::new(4);
        cache.insert(&[1, 2, 3, 4], &caches_for(&[1, 2, 3, 4]));
        let mut a = cache.lookup(&[1, 2, 7, 7]).unwrap();
        assert_eq!(a.len, 2);
        assert_eq!(keys(&mut a.caches[0], 7), vec![1.0, 2.0, 7.0]);
        let mut b = cache.lookup(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(keys(&mut b.caches[0], 5), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn covered_entries_are_replaced_and_lru_evicted() {
        let mut cache = PrefixCache::new(2);
        let a = cache.insert(&[1, 2], &caches_for(&[1, 2])).id.unwrap();
        let b = cache.insert(&[1, 2, 3], &caches_for(&[1, 2, 3]));
        assert_eq!(b.evicted, vec![a]);
        assert!(cache.insert(&[1, 2], &caches_for(&[1, 2])).id.is_none());
        cache.insert(&[5, 6], &caches_for(&[5, 6]));
        cache.lookup(&[1, 2, 3, 4]);
        let c = cache.insert(&[8, 9], &caches_for(&[8, 9]));
        assert_eq!(c.evicted, vec![3], "[5, 6] was used least recently");
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn zero_entries_turns_it_off() {
        let mut cache = PrefixCache::new(0);
        assert!(cache.insert(&[1, 2], &caches_for(&[1, 2])).id.is_none());
        assert!(cache.lookup(&[1, 2, 3]).is_none());
        assert_eq!(cache.stats().misses, 0);
    }

    /// A sliding layer (window 8) whose cache let go of its front: a prefix is reused where
    /// the 7 positions before it are still held, never where they are not.
    #[test]
    fn a_window_prefix_is_reused_only_where_the_window_is_held() {
        let window = 8;
        let tokens: Vec<u32> = (0..600).collect();
        let kind = crate::cache::CacheKind::Kv {
            window: Some(window),
        };
        let mut c = LayerCache::new(crate::cache::KvFormat::default(), kind);
        for chunk in tokens.chunks(100) {
            let n = chunk.len() as i32;
            let k = Array::from_slice(chunk, &[1, 1, n, 1]).as_dtype(mlx_rs::Dtype::Float32);
            let k = k.unwrap();
            let (seen, _) = c.kv().unwrap().update_and_fetch(&k, &k).unwrap();
            assert_eq!(seen.shape()[2], (n + window - 1).min(c.offset()));
        }
        let mut cache = PrefixCache::new(4).with_windows(vec![window]);
        cache.insert(&tokens, &[c]);
        let dropped = crate::cache::window_dropped(window, 600);
        assert_eq!(dropped, 512);
        let far = [&tokens[..300], &[9999, 9999]].concat();
        assert!(cache.lookup(&far).is_none(), "positions 293..300 are gone");
        let near = [&tokens[..560], &[9999, 9999]].concat();
        let mut hit = cache.lookup(&near).unwrap();
        assert_eq!(hit.len, 560);
        assert!(hit.caches[0].can_cut_to(560));
        let seen = keys(&mut hit.caches[0], 7777);
        let want: Vec<f32> = (553..560).map(|t| t as f32).chain([7777.0]).collect();
        assert_eq!(seen, want, "the window before 560, then the new position");
    }

    /// A recurrent layer's entry resumes only at its last cut point within the shared prefix
    /// (checkpoints every 256 positions and its end); a match with none is a miss.
    #[test]
    fn a_recurrent_entry_resumes_at_its_last_shared_checkpoint() {
        use crate::cache::{Checkpoint, RecurrentState};
        let state = |v: f32| {
            (
                Array::from_slice(&[v], &[1, 1, 1]),
                Array::from_slice(&[v], &[1, 1, 1, 1]),
            )
        };
        let mut r = RecurrentState::new();
        let (conv, st) = state(256.0);
        let at256 = Checkpoint {
            at: 256,
            conv,
            state: st,
        };
        r.advance(state(600.0), 600, vec![at256]);
        let tokens: Vec<u32> = (0..600).collect();
        let mut cache = PrefixCache::new(4);
        cache.insert(&tokens, &[LayerCache::Recurrent(r)]);
        let within = [&tokens[..400], &[9999, 9999]].concat();
        let hit = cache.lookup(&within).unwrap();
        assert_eq!((hit.len, hit.caches[0].offset()), (256, 256));
        let whole = [&tokens[..], &[9999]].concat();
        assert_eq!(cache.lookup(&whole).map(|h| h.len), Some(600));
        let early = [&tokens[..200], &[9999, 9999]].concat();
        assert!(cache.lookup(&early).is_none(), "no checkpoint before 200");
    }
}
