//! A worker rank (1 and up): join rank 0, then load and step exactly as told. It never
//! samples, never sees a prompt and never decides to stop; it outlives Free, LoadModel of
//! another model, and rank 0 going away (it waits for rank 0 to come back).

use std::rc::Rc;

use mlx_rs::Array;

use super::cluster_load::shard_plan;
use crate::cache::KvCache;
use crate::distributed::link::{Link, LinkError, LinkOptions};
use crate::distributed::pipeline::{dtype_from_name, pass_on, receive};
use crate::distributed::protocol::{
    state_fingerprint, LoadPlan, Part, StepPlan, ToLeader, ToWorker,
};
use crate::distributed::wire::{digest, Secret};
use crate::distributed::{clear_groups, Group, Hostfile};
use crate::error::{Error, Result};
use crate::loader;
use crate::models::common::Decoder;
use crate::source;
use crate::weights::WeightMode;

pub struct FollowerOptions {
    pub rank: usize,
    pub hostfile: Hostfile,
    pub coordinator: Option<String>,
    pub control_port: Option<u16>,
}

/// Serves rank 0 forever; returns only when rank 0 refuses this worker.
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
        secret: Secret::new(
            std::env::var("MLX_DISTRIBUTED_TOKEN").ok().as_deref(),
            &json,
        ),
    };
    loop {
        let link = match Link::wait_for_leader(&link_opts) {
            Ok(link) => link,
            Err(LinkError::Rejected(reason)) => return Err(Error::Distributed(reason)),
            Err(LinkError::Retry(why)) => return Err(Error::Distributed(why)),
        };
        tracing::info!(control = %link_opts.control, "joined rank 0");
        let mut follower = Follower {
            opts,
            group: None,
            model: None,
            caches: Vec::new(),
            tokens: Vec::new(),
        };
        follower.serve(&link);
        drop(follower);
        clear_groups();
        tracing::info!("rank 0 went away; waiting for it to come back");
    }
}

struct Worker {
    decoder: Decoder,
    part: Part,
    hidden: i32,
    fingerprint: String,
}

struct Follower<'a> {
    opts: &'a FollowerOptions,
    group: Option<Rc<Group>>,
    model: Option<Worker>,
    caches: Vec<KvCache>,
    /// The current sequence's token ids (tensor mode), for the state fingerprint.
    tokens: Vec<u32>,
}

impl Follower<'_> {
    fn serve(&mut self, link: &Link) {
        for msg in link.messages.iter() {
            let reply = match msg {
                ToWorker::InitGroup => Some(self.init_group()),
                ToWorker::Load(plan) => Some(self.load(&plan)),
                ToWorker::Free => {
                    self.model = None;
                    self.caches.clear();
                    let _ = mlx_rs::memory::clear_cache();
                    tracing::info!("model freed");
                    Some(ToLeader::Freed)
                }
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

    fn load(&mut self, plan: &LoadPlan) -> ToLeader {
        self.model = None;
        self.caches.clear();
        let _ = mlx_rs::memory::clear_cache();
        match self.try_load(plan) {
            Ok(worker) => {
                let fingerprint = worker.fingerprint.clone();
                tracing::info!(model = %plan.model, part = ?plan.part, "model part loaded");
                self.model = Some(worker);
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
        let dir = source::resolve(
            &plan.model,
            plan.model_path.as_deref().map(std::path::Path::new),
        )?;
        let mode = match plan.dequantize {
            true => WeightMode::DequantizeF32,
            false => WeightMode::AsStored,
        };
        let shard = shard_plan(&plan.part, self.opts.rank, group);
        let (decoder, loaded) = loader::load_part(&dir, mode, &shard)?;
        let hidden = loaded.config["hidden_size"]
            .as_i64()
            .ok_or_else(|| Error::Config("config.json has no hidden_size".into()))?
            as i32;
        Ok(Worker {
            decoder,
            part: plan.part.clone(),
            hidden,
            fingerprint: loader::fingerprint(&dir)?,
        })
    }

    /// Runs this rank's part of one forward pass.
    fn step(&mut self, p: &StepPlan, link: &Link) -> Result<Option<ToLeader>> {
        let (Some(m), Some(group)) = (&self.model, &self.group) else {
            return Err(Error::NotLoaded);
        };
        if p.offset == 0 {
            self.caches = (0..m.decoder.layers.len())
                .map(|_| KvCache::new())
                .collect();
            self.tokens.clear();
        }
        let have = self.caches.first().map_or(0, |c| c.offset() as usize);
        if have != p.offset {
            tracing::error!(
                have,
                want = p.offset,
                "cache position differs from rank 0's"
            );
        }
        self.tokens.extend(&p.tokens);
        let len = p.len as i32;
        let state = |caches: &[KvCache]| -> Vec<Array> {
            caches
                .iter()
                .flat_map(|c| c.state().into_iter().cloned())
                .collect()
        };
        match m.part {
            Part::Pipeline { .. } => {
                let dtype = dtype_from_name(&p.dtype).ok_or_else(|| {
                    Error::Distributed(format!("unknown activation dtype {}", p.dtype))
                })?;
                let h = receive(group, &[1, len, m.hidden], dtype)?;
                let h = m.decoder.run_layers(&h, &mut self.caches)?;
                let mut computed = state(&self.caches);
                computed.push(h.clone());
                mlx_rs::transforms::eval(&computed)?;
                let last = group.rank() + 1 == group.size();
                if !last || p.output {
                    link.send(&ToLeader::Ready { seq: p.seq })
                        .map_err(|e| Error::Distributed(format!("rank 0 went away: {e}")))?;
                    pass_on(group, &h)?.eval()?;
                }
            }
            Part::Tensor => {
                let ids = Array::from_slice(&p.tokens, &[1, len]);
                let h = m.decoder.embed(&ids)?;
                let h = m.decoder.run_layers(&h, &mut self.caches)?;
                let mut computed = state(&self.caches);
                if p.output {
                    computed.push(h);
                }
                mlx_rs::transforms::eval(&computed)?;
            }
        }
        let offset = self.caches.first().map_or(0, |c| c.offset() as usize);
        Ok(p.check.then(|| ToLeader::Check {
            seq: p.seq,
            state: state_fingerprint(p.seq, offset, &m.fingerprint, &self.tokens),
        }))
    }
}
