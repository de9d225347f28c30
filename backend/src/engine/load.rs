//! LoadModel's orchestration: refused, waited for (workers or P2P peers, on a thread of
//! their own while this one serves), or run now; then built and installed, or failed with the
//! old model still serving.

use std::sync::Arc;
use std::time::Duration;

use super::batch::Batch;
use super::build::{check_waits, grammars_for, kv_budget, Built};
use super::cluster_load::{self, Joined};
use super::core::{Command, EngineThread, Loaded, Serving};
use super::guard::guard;
use super::shared::{EngineState, Metrics, ModelInfo, Snapshot};
use super::wait::{self, Job, Outcome, Pending, Reply, Waited};
use crate::distributed::{clear_groups, Fault, Hostfile};
use crate::error::{Error, Result};
use crate::options::LoadConfig;
use crate::request::ModelSerial;

/// LoadModel in two phases: the wait for workers on its own thread (`wait.rs`), while this
/// thread serves, then the load itself here.
impl EngineThread {
    /// A LoadModel: refused while another one waits for its workers (unless that one's
    /// caller left: then it is cancelled), started as a wait when it needs workers or peers,
    /// or run now.
    pub(super) fn on_load(&mut self, config: Box<LoadConfig>, reply: Arc<Reply>) {
        if let Some(p) = &mut self.pending {
            if p.abandoned().is_none() {
                let model = crate::error::quote(&p.config.model);
                return reply.send(Err(Error::Aborted(format!(
                    "another LoadModel (`{model}`) is waiting for its workers; call LoadModel \
                     again once it has ended, or cancel it (its caller leaving or Free ends it)"
                ))));
            }
            self.winding = p.cancel("a newer LoadModel replaced it after its caller left");
            self.pending = None;
            self.publish(|s| s.load_wait = None);
        }
        let job = check_waits(&config).and_then(|()| self.wait_job(&config));
        match job {
            Err(e) => {
                self.after_failed_load(&e);
                reply.send(Err(e));
            }
            Ok(Some(job)) => self.start_wait(config, reply, job),
            Ok(None) => reply.send(self.load(*config, Ready::Now, &reply)),
        }
    }

    /// The wait `config` needs: P2P discovery, or the joins of a cluster other than the
    /// engine's (whose old cluster is left first: its workers must leave it to join).
    pub(super) fn wait_job(&mut self, config: &LoadConfig) -> Result<Option<Job>> {
        if config.p2p.is_some() {
            return Ok(Some(Job::Discover));
        }
        let Some(hostfile) = cluster_load::read_hostfile(config)?.filter(|h| h.size() > 1) else {
            return Ok(None);
        };
        if cluster_load::reusable(self.formed.as_ref(), &hostfile) {
            return Ok(None);
        }
        self.leave_cluster();
        Ok(Some(Job::Form {
            hostfile,
            found: None,
        }))
    }

    /// Starts `job` on its own thread; this thread serves until its outcome is posted.
    pub(super) fn start_wait(&mut self, config: Box<LoadConfig>, reply: Arc<Reply>, job: Job) {
        wait::join_within(self.winding.take(), WAIT_END_LIMIT);
        self.waits += 1;
        let model = config.model.clone();
        match Pending::start(self.waits, config, reply.clone(), job, self.post.clone()) {
            Ok(p) => self.pending = Some(p),
            Err(e) => {
                self.after_failed_load(&e);
                return reply.send(Err(e));
            }
        }
        tracing::info!(%model, "LoadModel waits for its workers; serving goes on meanwhile");
        let serving = self.serving.loaded().is_some();
        self.publish(|s| {
            s.load_wait = Some(model);
            s.last_error = None;
            if !serving {
                s.state = EngineState::Loading;
            }
        });
    }

    /// A wait ended: a late outcome of a cancelled wait is dropped (the workers that joined
    /// it are let go); otherwise the load goes on here, or waits again for the P2P workers' joins.
    pub(super) fn on_waited(&mut self, outcome: Outcome) {
        let Some(mut p) = self.pending.take_if(|p| p.id == outcome.id) else {
            return;
        };
        wait::join_within(p.thread(), WAIT_END_LIMIT);
        self.publish(|s| s.load_wait = None);
        let result = match p.abandoned() {
            Some(left) => Err(left),
            None => outcome.result,
        };
        let ready = match result {
            Err(e) => {
                tracing::warn!(model = %p.config.model, "LoadModel's wait ended: {e}");
                self.after_failed_load(&e);
                return p.reply.send(Err(e));
            }
            Ok(Waited::Joined { hostfile, joined }) => Ready::Cluster {
                hostfile,
                joined: Some(joined),
            },
            Ok(Waited::Found(found)) => {
                if !cluster_load::reusable(self.formed.as_ref(), &found.hostfile) {
                    self.leave_cluster();
                    let hostfile = found.hostfile.clone();
                    let found = Some(found);
                    return self.start_wait(p.config, p.reply, Job::Form { hostfile, found });
                }
                Ready::Cluster {
                    hostfile: found.hostfile.clone(),
                    joined: None,
                }
            }
        };
        let result = self.load(*p.config, ready, &p.reply);
        p.reply.send(result);
    }

    /// A load needs another cluster: the engine's workers must leave theirs to join it, and
    /// MLX holds one group at a time, so the model served on it (if any) ends now (ABORTED)
    /// and the cluster closes (its workers wait to join again).
    pub(super) fn leave_cluster(&mut self) {
        if self.serving.on_cluster() {
            self.unload(&Error::Aborted(
                "the model was replaced by LoadModel over another cluster".into(),
            ));
            self.publish(|s| {
                s.model = None;
                s.cluster_fault = None;
                s.ranks = None;
                s.state = EngineState::Loading;
            });
        }
        self.formed = None;
        clear_groups();
    }

    /// LoadModel, all or nothing: the new model is built beside the one being served and
    /// replaces it only once complete; on failure the old one keeps serving. A load over a
    /// cluster stops waiting for the workers' parts once `reply`'s caller left.
    pub(super) fn load(&mut self, config: LoadConfig, ready: Ready, reply: &Reply) -> Result<()> {
        self.publish(|s| {
            s.state = EngineState::Loading;
            s.last_error = None;
        });
        let give_up = || reply.closed().then(wait::caller_left_load);
        let outcome = match guard(|| self.build(&config, ready, &give_up)) {
            Ok(outcome) => outcome,
            Err(panic) => Err(Error::Internal(format!("loading panicked: {panic}"))),
        };
        let result = match outcome {
            Ok(built) => {
                self.install(built);
                Ok(())
            }
            Err(e) => {
                self.after_failed_load(&e);
                Err(e)
            }
        };
        crate::memory::release();
        result
    }

    /// Serves `built` from now on: the requests of the old model end ABORTED.
    pub(super) fn install(&mut self, built: Built) {
        self.unload(&Error::Aborted(
            "the model was replaced by LoadModel".into(),
        ));
        let kv_budget = kv_budget(&built.config);
        let cluster_fault = built.on_cluster.then(|| self.watch_cluster()).flatten();
        let ranks = built.on_cluster.then_some(self.formed.as_ref()).flatten();
        let ranks = ranks.map(|s| s.cluster.board().clone());
        self.loads += 1;
        let serial = ModelSerial(self.loads);
        let info = ModelInfo {
            serial,
            config: built.config.clone(),
            tokenizer: built.model.tokenizer.clone(),
            context: built.context,
            weights: built.model.model.weight_stats(),
            grammars: Arc::new(grammars_for(&built)),
            text_only: crate::models::facts_of(&built.model.config)
                .is_ok_and(|f| f.layout.text_only()),
        };
        self.publish(|s| {
            *s = Snapshot {
                state: EngineState::Ready,
                model: Some(info),
                cluster_fault,
                ranks,
                metrics: Metrics {
                    kv_budget_bytes: kv_budget,
                    ..Default::default()
                },
                ..Snapshot::default()
            }
        });
        self.batch = Batch::new(built.config.limits.max_cache_entries)
            .with_windows(built.model.model.model_windows())
            .with_drafter(built.draft);
        self.serving = Serving::Model(Box::new(Loaded {
            serial,
            model: built.model,
            config: built.config,
            kv_budget,
            on_cluster: built.on_cluster,
        }));
    }

    /// The cluster's faults come to this thread as `ClusterFault` commands; returns its latch.
    pub(super) fn watch_cluster(&self) -> Option<Arc<Fault>> {
        let fault = self.formed.as_ref()?.cluster.fault();
        let post = self.post.clone();
        fault.post_to(Box::new(move || {
            let _ = post.send(Command::ClusterFault);
        }));
        Some(fault.clone())
    }

    /// The old model (if any) keeps serving; the error is the last one Status reports.
    pub(super) fn after_failed_load(&mut self, e: &Error) {
        if let Error::RankLost(lost) = e {
            if self.serving.on_cluster() {
                return self.degrade(lost); // the served model was on the lost cluster
            }
            self.formed = None;
            clear_groups();
        }
        let msg = e.to_string();
        let serving = self.serving.loaded().is_some();
        self.publish(|s| {
            if !serving {
                s.model = None;
            }
            s.state = match serving {
                true => EngineState::Ready,
                false => EngineState::Error,
            };
            s.last_error = Some(msg);
        });
    }
}

/// What a load's wait phase left for the engine thread.
pub(super) enum Ready {
    /// Nothing was waited for: a single node, or the engine's cluster reused (the hostfile
    /// is read now).
    Now,
    /// Over `hostfile`'s cluster: the workers that joined it in the wait (`joined`), or the
    /// engine's own cluster when it is that one already.
    Cluster {
        hostfile: Hostfile,
        joined: Option<Box<Joined>>,
    },
}

/// How long a cancelled wait may take to end (it looks at its cancel every 20-50 ms).
pub(super) const WAIT_END_LIMIT: Duration = Duration::from_secs(2);
