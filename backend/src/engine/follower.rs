//! A worker rank (1 and up): join rank 0, then load and step exactly as told. It never
//! samples, never sees a prompt and never decides to stop; it outlives Free, LoadModel of
//! another model, and rank 0 going away (it waits for rank 0 to come back).

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use mlx_rs::Array;

use super::cluster_load::rank_part;
use super::relay::Stage;
use crate::cache::{CacheKind, KvFormat, LayerCache};
use crate::distributed::link::Link;
use crate::distributed::protocol::{
    state_fingerprint, CacheOp, LoadPlan, Part, PlanRow, Shipment, StepPlan, ToLeader, ToWorker,
};
use crate::distributed::wire::Secret;
use crate::distributed::{clear_groups, Group, Hostfile, LinkError, LinkOptions, StepTimes};
use crate::error::{Error, Result};
use crate::lifecycle;
use crate::loader;
use crate::models::Transformer;
use crate::shipping::{self, ReceiveOptions};
use crate::source;

pub struct FollowerOptions {
    pub rank: usize,
    pub hostfile: Hostfile,
    pub coordinator: Option<String>,
    pub control_port: Option<u16>,
    /// The control channel's secret (else the hostfile's digest).
    pub token: Option<String>,
    pub membership: Membership,
}

/// What a worker does when rank 0 goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// A hostfile's rank: wait for rank 0 to come back.
    Fixed,
    /// A rank given by a P2P rank 0 for one cluster: return, to be given a rank again. Rank 0
    /// must come within `ASSIGNED_JOIN_WAIT` (else it gave up on this cluster).
    Assigned,
}

/// How long an assigned worker waits for the rank 0 that assigned it.
const ASSIGNED_JOIN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Serves rank 0 until a stop is requested (`Ok`) or rank 0 refuses this worker.
pub fn run(opts: &FollowerOptions) -> Result<()> {
    opts.hostfile
        .check_rank(opts.rank)
        .map_err(Error::Distributed)?;
    if opts.rank == 0 {
        return Err(Error::Distributed(
            "rank 0 serves gRPC; workers are ranks 1 and up".into(),
        ));
    }
    let control = opts
        .hostfile
        .control_address(opts.coordinator.as_deref(), opts.control_port)
        .map_err(Error::Distributed)?;
    let link_opts = LinkOptions::new(&opts.hostfile, opts.rank, control, opts.token.as_deref());
    let until = match opts.membership {
        Membership::Fixed => None,
        Membership::Assigned => Some(std::time::Instant::now() + ASSIGNED_JOIN_WAIT),
    };
    loop {
        let link = match Link::wait_for_leader(&link_opts, until) {
            Ok(link) => link,
            Err(LinkError::Stopped) => return Ok(()),
            Err(LinkError::Rejected(reason)) => return Err(Error::Distributed(reason)),
            Err(LinkError::Retry(why)) => return Err(Error::Distributed(why)),
        };
        tracing::info!(control = %link_opts.control, "joined rank 0");
        let mut follower = Follower {
            opts,
            secret: link_opts.secret.clone(),
            group: None,
            model: None,
            pending: None,
            caches: RankCaches::default(),
            times: Cell::default(),
        };
        follower.serve(&link);
        drop(follower);
        drop(link);
        clear_groups();
        if lifecycle::stop_requested() {
            tracing::info!("stopping");
            return Ok(());
        }
        if opts.membership == Membership::Assigned {
            tracing::info!("rank 0 closed the cluster");
            return Ok(());
        }
        tracing::info!("rank 0 went away; waiting for it to come back");
    }
}

struct Worker {
    transformer: Box<dyn Transformer>,
    part: Part,
    hidden: i32,
    fingerprint: String,
    /// How this rank stores its caches (rank 0's choice, from the load plan).
    kv: KvFormat,
}

struct Follower<'a> {
    opts: &'a FollowerOptions,
    /// The control channel's secret, proven again to model shipping.
    secret: Secret,
    group: Option<Rc<Group>>,
    model: Option<Worker>,
    /// A part loaded beside `model`, waiting for rank 0's `Commit` (every rank loaded).
    pending: Option<Worker>,
    caches: RankCaches,
    /// This rank's step times since its model was committed, carried on its replies.
    times: Cell<StepTimes>,
}

/// This rank's layers of every cache rank 0 names: exactly the changes rank 0 plans, so the
/// state check can compare them.
#[derive(Default)]
struct RankCaches {
    /// Each live sequence's caches (one per layer of this rank's part), by the slot rank 0 gave it.
    slots: HashMap<u64, Vec<LayerCache>>,
    /// This rank's layers of each prefix-cache entry, under the id rank 0 gave it.
    saved: HashMap<u64, Vec<LayerCache>>,
}

impl Follower<'_> {
    /// Answers rank 0's messages until it goes away or a stop is requested.
    fn serve(&mut self, link: &Link) {
        while let Some(msg) = link.next_message() {
            let reply = match msg {
                ToWorker::InitGroup => Some(self.init_group()),
                ToWorker::Load(plan) => Some(self.load(&plan)),
                ToWorker::Commit => {
                    self.commit();
                    None
                }
                ToWorker::Abort => {
                    self.pending = None;
                    crate::memory::release();
                    None
                }
                ToWorker::Free => {
                    self.model = None;
                    self.pending = None;
                    self.caches = RankCaches::default();
                    crate::memory::release();
                    tracing::info!("model freed");
                    Some(ToLeader::Freed)
                }
                ToWorker::Probe { model, model_path } => Some(ToLeader::Probed {
                    model: loader::find_local(
                        &model,
                        model_path.as_deref().map(std::path::Path::new),
                    )
                    .map_err(|e| e.to_string()),
                    free_memory: crate::distributed::free_memory(),
                }),
                ToWorker::Step(plan) => match self.step(&plan, link) {
                    Ok(reply) => reply,
                    Err(e) => {
                        tracing::error!(seq = plan.seq, "step failed: {e}");
                        Some(ToLeader::StepFailed {
                            error: e.to_string(),
                        })
                    }
                },
                other => {
                    tracing::warn!("unexpected message from rank 0: {other:?}");
                    None
                }
            };
            if let Some(reply) = reply {
                if link.send(&reply).is_err() {
                    return;
                }
            }
        }
    }

    fn init_group(&mut self) -> ToLeader {
        match Group::join(
            &self.opts.hostfile,
            self.opts.rank,
            self.opts.coordinator.as_deref(),
        ) {
            Ok(group) => {
                tracing::info!(size = group.size(), "joined the MLX group");
                self.group = Some(Rc::new(group));
                ToLeader::GroupReady
            }
            Err(e) => ToLeader::Failed {
                error: e.to_string(),
            },
        }
    }

    /// Builds the new part beside the one being served (a failed load on any rank leaves
    /// every rank serving the old model); `Commit` swaps it in.
    fn load(&mut self, plan: &LoadPlan) -> ToLeader {
        self.pending = None;
        crate::memory::release();
        match self.try_load(plan) {
            Ok(worker) => {
                let fingerprint = worker.fingerprint.clone();
                tracing::info!(model = %plan.model, part = ?plan.part, "model part loaded");
                self.pending = Some(worker);
                ToLeader::Loaded {
                    load: plan.load,
                    fingerprint,
                }
            }
            Err(e) => {
                tracing::error!(model = %plan.model, "load failed: {e}");
                ToLeader::LoadFailed {
                    load: plan.load,
                    error: e.to_string(),
                }
            }
        }
    }

    fn try_load(&self, plan: &LoadPlan) -> Result<Worker> {
        let group = self
            .group
            .as_ref()
            .ok_or_else(|| Error::Distributed("no MLX group yet".into()))?;
        let lookup = source::Lookup {
            model_path: plan.model_path.as_deref().map(std::path::Path::new),
            allow_outside: plan.allow_paths_outside_model_path,
        };
        let dir = match &plan.ship {
            Some(ship) => self.shipped(ship)?,
            None => source::resolve_with(&plan.model, &lookup)?,
        };
        let adapters = source::resolve_adapters(&plan.adapters, &lookup)?;
        let recipe = loader::Recipe {
            mode: plan.weight_mode,
            adapters: &adapters,
        };
        let loaded =
            loader::load_part(&dir, recipe, &rank_part(&plan.part, self.opts.rank, group))?;
        loaded.transformer.check_kv_format(&plan.kv_format)?;
        let hidden = crate::models::text_config_of(&loaded.config)?["hidden_size"]
            .as_i64()
            .ok_or_else(|| Error::Config("config.json has no hidden_size".into()))?
            as i32;
        Ok(Worker {
            transformer: loaded.transformer,
            part: plan.part.clone(),
            hidden,
            fingerprint: loader::fingerprint_with(&dir, &adapters)?,
            kv: plan.kv_format,
        })
    }

    /// `ship_model`: the share rank 0 ships, in this machine's cache (received if missing).
    fn shipped(&self, ship: &Shipment) -> Result<std::path::PathBuf> {
        let opts = ReceiveOptions {
            rank: self.opts.rank,
            secret: &self.secret,
            cache: shipping::cache_root()?,
        };
        shipping::receive(ship, &opts)
    }

    /// Runs this rank's part of one forward pass over the plan's rows.
    fn step(&mut self, p: &StepPlan, link: &Link) -> Result<Option<ToLeader>> {
        for op in &p.cache_ops {
            self.caches.apply(*op)?;
        }
        let (Some(m), Some(group)) = (&self.model, &self.group) else {
            return Err(Error::NotLoaded);
        };
        let mut taken = self
            .caches
            .take(&p.rows, &m.transformer.layer_caches(), m.kv)?;
        let outcome = run_part(m, group, p, link, &mut taken, &self.times);
        let rows = self.caches.put_back(taken);
        outcome?;
        Ok(p.check.then(|| ToLeader::Check {
            seq: p.seq,
            state: state_fingerprint(
                p.seq,
                &rows,
                &self.caches.entries(),
                &m.fingerprint,
                &p.tokens,
            ),
            times: Some(self.times.get()),
        }))
    }

    /// Serves the part loaded last; the old part and every cache of it go.
    fn commit(&mut self) {
        match self.pending.take() {
            Some(worker) => {
                self.model = Some(worker);
                self.caches = RankCaches::default();
                self.times = Cell::default();
                crate::memory::release();
            }
            None => tracing::warn!("rank 0 committed a load this rank does not hold"),
        }
    }
}

impl RankCaches {
    /// Applies one of rank 0's cache changes to this rank's layers.
    fn apply(&mut self, op: CacheOp) -> Result<()> {
        let missing = |what: &str| Error::Distributed(format!("{what} is not cached on this rank"));
        match op {
            CacheOp::Save { slot, entry, len } => {
                let caches = self
                    .slots
                    .get(&slot)
                    .ok_or_else(|| missing(&format!("slot {slot}")))?;
                let kept = caches.iter().map(|c| c.prefix(len)).collect();
                self.saved.insert(entry, kept);
            }
            CacheOp::Restore { slot, entry, len } => {
                let caches = self
                    .saved
                    .get(&entry)
                    .ok_or_else(|| missing(&format!("prefix-cache entry {entry}")))?;
                if !caches.iter().all(|c| c.can_cut_to(len)) {
                    return Err(Error::Distributed(format!(
                        "prefix-cache entry {entry} no longer holds the window before \
                         position {len}"
                    )));
                }
                let restored = caches.iter().map(|c| c.prefix(len)).collect();
                self.slots.insert(slot, restored);
            }
            CacheOp::Release { slot } => {
                self.slots.remove(&slot);
            }
            CacheOp::Evict { entry } => {
                self.saved.remove(&entry);
            }
            CacheOp::Adopt { entry, from } => {
                let old = self.saved.get(&from).cloned().unwrap_or_default();
                let new = self.saved.get_mut(&entry);
                let new = new.ok_or_else(|| missing(&format!("prefix-cache entry {entry}")))?;
                new.iter_mut().zip(&old).for_each(|(c, o)| c.adopt(o));
            }
            CacheOp::Trim { slot, len } => {
                let caches = self
                    .slots
                    .get_mut(&slot)
                    .ok_or_else(|| missing(&format!("slot {slot}")))?;
                for cache in caches.iter_mut() {
                    cache.trim(len);
                }
            }
        }
        Ok(())
    }

    /// Each row's caches, out of the map for a step (new ones for a row at offset 0); every
    /// row must be where rank 0 says it is, or nothing is taken.
    fn take(
        &mut self,
        rows: &[PlanRow],
        kinds: &[CacheKind],
        format: KvFormat,
    ) -> Result<Vec<(u64, Vec<LayerCache>)>> {
        for row in rows.iter().filter(|r| r.offset > 0) {
            let have = self.slots.get(&row.slot).and_then(|c| c.first());
            let have = have.map_or(0, |c| c.offset() as usize);
            if have != row.offset {
                return Err(Error::Distributed(format!(
                    "slot {} is at position {have}, rank 0 expects {}",
                    row.slot, row.offset
                )));
            }
        }
        let fresh = || LayerCache::for_layers(format, kinds);
        Ok(rows
            .iter()
            .map(|row| match row.offset {
                0 => (row.slot, fresh()),
                _ => (row.slot, self.slots.remove(&row.slot).unwrap_or_default()),
            })
            .collect())
    }

    /// Puts a step's caches back: each row where it now is.
    fn put_back(&mut self, taken: Vec<(u64, Vec<LayerCache>)>) -> Vec<PlanRow> {
        let rows = taken
            .iter()
            .map(|(slot, c)| PlanRow {
                slot: *slot,
                offset: c.first().map_or(0, |c| c.offset() as usize),
            })
            .collect();
        self.slots.extend(taken);
        rows
    }

    /// The prefix-cache entries this rank holds.
    fn entries(&self) -> Vec<u64> {
        self.saved.keys().copied().collect()
    }
}

/// This rank's layers over the rows' activations (received, or embedded in tensor mode).
fn run_part(
    m: &Worker,
    group: &Group,
    p: &StepPlan,
    link: &Link,
    taken: &mut [(u64, Vec<LayerCache>)],
    times: &Cell<StepTimes>,
) -> Result<()> {
    let (b, len) = (p.rows.len() as i32, p.len as i32);
    let mut caches: Vec<&mut [LayerCache]> =
        taken.iter_mut().map(|(_, c)| c.as_mut_slice()).collect();
    match m.part {
        Part::Pipeline { .. } => {
            let stage = Stage {
                link,
                group,
                shape: [b, len, m.hidden],
                times,
            };
            stage.run(m.transformer.as_ref(), p, &mut caches)
        }
        Part::Tensor | Part::Expert => {
            let ids = Array::from_slice(&p.tokens, &[b, len]);
            let h = m.transformer.embed(&ids)?;
            let h = m.transformer.run_layers(&h, &mut caches)?;
            let mut computed = LayerCache::states(&caches);
            if p.output {
                computed.push(h);
            }
            let started = Instant::now();
            mlx_rs::transforms::eval(&computed)?;
            let mut t = times.get();
            t.steps += 1;
            t.add(crate::distributed::Phase::Compute, started.elapsed());
            times.set(t);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use mlx_rs::ops::zeros;

    use super::*;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    const LAYERS: usize = 2;

    fn row(slot: u64, offset: usize) -> PlanRow {
        PlanRow { slot, offset }
    }

    /// One step of `len` positions for every row, as a layer's update makes it.
    fn step(caches: &mut RankCaches, rows: &[PlanRow], len: i32) -> Result<Vec<PlanRow>> {
        let kinds = [CacheKind::Kv { window: None }; LAYERS];
        let mut taken = caches.take(rows, &kinds, KvFormat::default())?;
        let kv = zeros::<f32>(&[1, 1, len, 1])?;
        for (_, layers) in &mut taken {
            for cache in layers.iter_mut() {
                cache.kv()?.update(&kv, &kv)?;
            }
        }
        Ok(caches.put_back(taken))
    }

    /// Rows move as rank 0 plans them; a row that is not where rank 0 says fails the step
    /// naming the slot and both positions, and takes nothing (the other rows keep their caches).
    #[test]
    fn a_row_out_of_place_names_its_slot_and_takes_nothing() -> TestResult {
        let mut caches = RankCaches::default();
        assert_eq!(
            step(&mut caches, &[row(1, 0), row(2, 0)], 5)?,
            [row(1, 5), row(2, 5)]
        );
        assert_eq!(
            step(&mut caches, &[row(1, 5), row(2, 5)], 1)?,
            [row(1, 6), row(2, 6)]
        );
        let err = step(&mut caches, &[row(1, 6), row(2, 4)], 1).unwrap_err();
        assert!(
            err.to_string()
                .contains("slot 2 is at position 6, rank 0 expects 4"),
            "{err}"
        );
        assert_eq!(
            step(&mut caches, &[row(1, 6), row(2, 6)], 1)?,
            [row(1, 7), row(2, 7)]
        );
        let err = step(&mut caches, &[row(9, 3)], 1).unwrap_err();
        assert!(err.to_string().contains("slot 9 is at position 0"), "{err}");
        Ok(())
    }

    /// Prefix-cache changes: a saved prefix restores into another slot at its length, a
    /// change naming what this rank does not hold is an error naming it, and evicted entries
    /// leave the state.
    #[test]
    fn cache_changes_follow_rank_0_and_name_what_is_missing() -> TestResult {
        let mut caches = RankCaches::default();
        step(&mut caches, &[row(1, 0)], 8)?;
        caches.apply(CacheOp::Save {
            slot: 1,
            entry: 40,
            len: 6,
        })?;
        caches.apply(CacheOp::Restore {
            slot: 2,
            entry: 40,
            len: 4,
        })?;
        caches.apply(CacheOp::Release { slot: 1 })?;
        assert_eq!(step(&mut caches, &[row(2, 4)], 2)?, [row(2, 6)]);
        assert_eq!(caches.entries(), [40]);
        let err = caches
            .apply(CacheOp::Save {
                slot: 1,
                entry: 41,
                len: 2,
            })
            .unwrap_err();
        assert!(err.to_string().contains("slot 1 is not cached"), "{err}");
        caches.apply(CacheOp::Evict { entry: 40 })?;
        assert!(caches.entries().is_empty());
        let err = caches
            .apply(CacheOp::Restore {
                slot: 3,
                entry: 40,
                len: 1,
            })
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("prefix-cache entry 40 is not cached"),
            "{err}"
        );
        Ok(())
    }
}
