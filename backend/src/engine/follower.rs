//! A worker rank (1 and up): join rank 0, then load and step exactly as told. It never
//! samples, never sees a prompt and never decides to stop; it outlives Free, LoadModel of
//! another model, and rank 0 going away (it waits for rank 0 to come back).

use std::collections::HashMap;
use std::rc::Rc;

use mlx_rs::Array;

use super::cluster_load::rank_part;
use crate::cache::KvCache;
use crate::distributed::inbox::bytes_of;
use crate::distributed::link::{Link, LinkError, LinkOptions};
use crate::distributed::pipeline::{announce_and_send, receive};
use crate::distributed::protocol::{
    state_fingerprint, CacheOp, LoadPlan, Part, Payload, PlanRow, Relay, StepPlan, ToLeader,
    ToWorker,
};
use crate::distributed::wire::{digest, Secret};
use crate::distributed::{clear_groups, Group, Hostfile};
use crate::error::{Error, Result};
use crate::lifecycle;
use crate::loader;
use crate::models::Transformer;
use crate::source;

pub struct FollowerOptions {
    pub rank: usize,
    pub hostfile: Hostfile,
    pub coordinator: Option<String>,
    pub control_port: Option<u16>,
    /// The control channel's secret (else the hostfile's digest).
    pub token: Option<String>,
}

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
    let json = opts.hostfile.mlx_json();
    let link_opts = LinkOptions {
        rank: opts.rank,
        control: opts
            .hostfile
            .control_address(opts.coordinator.as_deref(), opts.control_port)
            .map_err(Error::Distributed)?,
        hostfile_digest: digest(json.as_bytes()),
        secret: Secret::new(opts.token.as_deref(), &json),
    };
    loop {
        let link = match Link::wait_for_leader(&link_opts) {
            Ok(link) => link,
            Err(LinkError::Stopped) => return Ok(()),
            Err(LinkError::Rejected(reason)) => return Err(Error::Distributed(reason)),
            Err(LinkError::Retry(why)) => return Err(Error::Distributed(why)),
        };
        tracing::info!(control = %link_opts.control, "joined rank 0");
        let mut follower = Follower {
            opts,
            group: None,
            model: None,
            pending: None,
            slots: HashMap::new(),
            saved: HashMap::new(),
        };
        follower.serve(&link);
        drop(follower);
        drop(link);
        clear_groups();
        if lifecycle::stop_requested() {
            tracing::info!("stopping");
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
}

struct Follower<'a> {
    opts: &'a FollowerOptions,
    group: Option<Rc<Group>>,
    model: Option<Worker>,
    /// A part loaded beside `model`, waiting for rank 0's `Commit` (every rank loaded).
    pending: Option<Worker>,
    /// Each live sequence's caches (one per layer of this rank's part), by the slot rank 0 gave it.
    slots: HashMap<u64, Vec<KvCache>>,
    /// This rank's layers of each prefix-cache entry, under the id rank 0 gave it.
    saved: HashMap<u64, Vec<KvCache>>,
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
                    self.forget_caches();
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
                ToLeader::Loaded { fingerprint }
            }
            Err(e) => {
                tracing::error!(model = %plan.model, "load failed: {e}");
                ToLeader::Failed {
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
        let dir = source::resolve_with(&plan.model, &lookup)?;
        let mode = plan.weight_mode;
        let loaded = loader::load_part(&dir, mode, &rank_part(&plan.part, self.opts.rank, group))?;
        let hidden = loaded.config["hidden_size"]
            .as_i64()
            .ok_or_else(|| Error::Config("config.json has no hidden_size".into()))?
            as i32;
        Ok(Worker {
            transformer: loaded.transformer,
            part: plan.part.clone(),
            hidden,
            fingerprint: loader::fingerprint(&dir)?,
        })
    }

    /// Runs this rank's part of one forward pass over the plan's rows.
    fn step(&mut self, p: &StepPlan, link: &Link) -> Result<Option<ToLeader>> {
        for op in &p.cache_ops {
            self.apply(*op)?;
        }
        let (Some(m), Some(group)) = (&self.model, &self.group) else {
            return Err(Error::NotLoaded);
        };
        // Take each row's caches out of the map for the step, and put them back after.
        let mut taken: Vec<(u64, Vec<KvCache>)> = Vec::with_capacity(p.rows.len());
        for row in &p.rows {
            let caches = match row.offset {
                0 => (0..m.transformer.num_layers())
                    .map(|_| KvCache::new())
                    .collect(),
                _ => self.slots.remove(&row.slot).unwrap_or_default(),
            };
            let have = caches.first().map_or(0, |c| c.offset() as usize);
            if have != row.offset {
                return Err(Error::Distributed(format!(
                    "slot {} is at position {have}, rank 0 expects {}",
                    row.slot, row.offset
                )));
            }
            taken.push((row.slot, caches));
        }
        let outcome = run_part(m, group, p, link, &mut taken);
        let rows: Vec<PlanRow> = taken
            .iter()
            .map(|(slot, c)| PlanRow {
                slot: *slot,
                offset: c.first().map_or(0, |c| c.offset() as usize),
            })
            .collect();
        self.slots.extend(taken);
        outcome?;
        Ok(p.check.then(|| ToLeader::Check {
            seq: p.seq,
            state: state_fingerprint(
                p.seq,
                &rows,
                &self.saved.keys().copied().collect::<Vec<_>>(),
                &m.fingerprint,
                &p.tokens,
            ),
        }))
    }

    /// Serves the part loaded last; the old part and every cache of it go.
    fn commit(&mut self) {
        match self.pending.take() {
            Some(worker) => {
                self.model = Some(worker);
                self.forget_caches();
                crate::memory::release();
            }
            None => tracing::warn!("rank 0 committed a load this rank does not hold"),
        }
    }

    fn forget_caches(&mut self) {
        self.slots.clear();
        self.saved.clear();
    }

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
                let restored = caches.iter().map(|c| c.prefix(len)).collect();
                self.slots.insert(slot, restored);
            }
            CacheOp::Release { slot } => {
                self.slots.remove(&slot);
            }
            CacheOp::Evict { entry } => {
                self.saved.remove(&entry);
            }
        }
        Ok(())
    }
}

/// This rank's layers over the rows' activations (received, or embedded in tensor mode).
fn run_part(
    m: &Worker,
    group: &Group,
    p: &StepPlan,
    link: &Link,
    taken: &mut [(u64, Vec<KvCache>)],
) -> Result<()> {
    let (b, len) = (p.rows.len() as i32, p.len as i32);
    let mut caches: Vec<&mut [KvCache]> = taken.iter_mut().map(|(_, c)| c.as_mut_slice()).collect();
    match m.part {
        Part::Pipeline { .. } => {
            let handoff = p
                .handoff
                .ok_or_else(|| Error::Distributed("a pipeline step without its hand-off".into()))?;
            let stage = Stage {
                shape: [b, len, m.hidden],
                dtype: handoff.dtype.mlx(),
                sends: group.rank() + 1 < group.size() || p.output,
                last: group.rank() + 1 == group.size(),
            };
            match handoff.relay {
                Relay::Group => run_over_group(m, group, p, link, &mut caches, &stage),
                Relay::Control => run_over_control(m, p, link, &mut caches, &stage),
            }
        }
        Part::Tensor | Part::Expert => {
            let ids = Array::from_slice(&p.tokens, &[b, len]);
            let h = m.transformer.embed(&ids)?;
            let h = m.transformer.run_layers(&h, &mut caches)?;
            let mut computed = KvCache::states(&caches);
            if p.output {
                computed.push(h);
            }
            mlx_rs::transforms::eval(&computed)?;
            Ok(())
        }
    }
}

/// A pipeline rank's place in one step.
struct Stage {
    shape: [i32; 3],
    dtype: mlx_rs::Dtype,
    /// Whether this rank's output goes anywhere (the last rank's only when rank 0 wants it).
    sends: bool,
    last: bool,
}

/// Over the group (prefill-size steps): the graph is built at once, evaluated on `Go` (a
/// posted ring receive busy-polls a core), and the next rank is told before the send.
fn run_over_group(
    m: &Worker,
    group: &Group,
    p: &StepPlan,
    link: &Link,
    caches: &mut [&mut [KvCache]],
    stage: &Stage,
) -> Result<()> {
    let h = receive(group, &stage.shape, stage.dtype)?;
    let h = m.transformer.run_layers(&h, caches)?;
    let mut computed = KvCache::states(caches);
    computed.push(h.clone());
    await_go(link, p.seq)?;
    mlx_rs::transforms::eval(&computed)?;
    if !stage.sends {
        return Ok(());
    }
    announce_and_send(group, &h, || {
        let ready = ToLeader::Ready {
            seq: p.seq,
            activations: None,
        };
        link.send(&ready).map_err(rank_0_gone)
    })
}

/// Inside control messages: the whole graph goes to MLX at once, its receive waiting
/// (blocked) for the activations in rank 0's `Go`; the output goes back to rank 0.
fn run_over_control(
    m: &Worker,
    p: &StepPlan,
    link: &Link,
    caches: &mut [&mut [KvCache]],
    stage: &Stage,
) -> Result<()> {
    let h = link.inbox().receive(p.seq, &stage.shape, stage.dtype)?;
    let out = m.transformer.run_layers(&h, caches)?.contiguous()?;
    let mut computed = KvCache::states(caches);
    computed.push(out.clone());
    mlx_rs::transforms::eval(&computed)?;
    link.inbox().check()?;
    if !stage.sends {
        return Ok(());
    }
    let activations = Payload(bytes_of(&out)?);
    let msg = match stage.last {
        true => ToLeader::Output {
            seq: p.seq,
            activations,
        },
        false => ToLeader::Ready {
            seq: p.seq,
            activations: Some(activations),
        },
    };
    link.send(&msg).map_err(rank_0_gone)
}

fn rank_0_gone(e: std::io::Error) -> Error {
    Error::Distributed(format!("rank 0 went away: {e}"))
}

/// Waits for rank 0's word that the previous rank is sending step `seq`'s activations: the
/// graph is built meanwhile, and nothing polls.
fn await_go(link: &Link, seq: u64) -> Result<()> {
    match link.next_message() {
        Some(ToWorker::Go { seq: s, .. }) if s == seq => Ok(()),
        Some(other) => Err(Error::Distributed(format!(
            "expected the go of pipeline step {seq}, got {other:?}"
        ))),
        None => Err(Error::Distributed("rank 0 went away".into())),
    }
}
