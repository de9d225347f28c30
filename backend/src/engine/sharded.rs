//! Rank 0's view of a model spread over the cluster. Each forward pass first sends every
//! worker a step plan, then runs rank 0's part; workers never sample and never decide.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use mlx_rs::Array;

use super::relay::Leader;
use crate::cache::{CacheKind, KvFormat, LayerCache};
use crate::distributed::pipeline::handoff_for;
use crate::distributed::protocol::{
    state_fingerprint, CacheOp, Part, PlanRow, StepPlan, ToLeader, ToWorker,
};
use crate::distributed::wire::Secret;
use crate::distributed::Cluster;
use crate::distributed::Group;
use crate::error::{Error, Result};
use crate::models::{LanguageModel, Queueing, Row, Transformer};

/// Every this many steps, the ranks compare a fingerprint of their state.
const CHECK_EVERY: u64 = 16;

/// A formed cluster: its workers joined the control channel and the MLX group is up; kept
/// across loads while no rank is lost.
pub struct FormedCluster {
    pub cluster: Rc<Cluster>,
    pub group: Rc<Group>,
    pub hostfile_digest: String,
    /// Where workers reach rank 0's control channel, and the secret they proved: model
    /// shipping listens on that host and asks for that proof again.
    pub control: String,
    pub secret: Secret,
    /// The last step's number: it grows across models, so a late reply or activations of
    /// one model's step can never pass for another's.
    pub seq: Cell<u64>,
    /// The last load's number (`LoadPlan::load`): a late answer to a load rank 0 gave up
    /// on is never taken for the current one's.
    pub loads: Cell<u64>,
}

pub struct ShardedModel {
    pub transformer: Box<dyn Transformer>,
    pub formed: Rc<FormedCluster>,
    pub part: Part,
    pub fingerprint: String,
    /// How every rank stores its caches (sent in the load plan).
    kv: KvFormat,
    /// The prefix-cache entries every rank holds once those changes are applied.
    entries: RefCell<BTreeSet<u64>>,
    pending_check: RefCell<Option<(u64, String)>>,
    /// Rank 0's half of the pipeline relay (unused in tensor and expert modes).
    relay: Leader,
}

/// What one step leaves to evaluate: the logits, or (prefill) only side effects.
enum StepOutput {
    Logits(Array),
    Effects(Vec<Array>),
}

impl ShardedModel {
    pub fn new(
        transformer: Box<dyn Transformer>,
        formed: Rc<FormedCluster>,
        part: Part,
        fingerprint: String,
        kv: KvFormat,
    ) -> Self {
        let relay = Leader::new(formed.cluster.clone(), formed.group.clone());
        ShardedModel {
            transformer,
            formed,
            part,
            fingerprint,
            kv,
            entries: RefCell::new(BTreeSet::new()),
            pending_check: RefCell::new(None),
            relay,
        }
    }

    /// The step's plan for the workers; every 16th also sets the state check it asks for.
    fn plan(
        &self,
        inputs: &Array,
        rows: &[Row],
        output: bool,
        cache_ops: Vec<CacheOp>,
    ) -> Result<StepPlan> {
        let len = inputs.shape()[1] as usize;
        let plan_rows: Vec<PlanRow> = rows
            .iter()
            .map(|r| PlanRow {
                slot: r.slot,
                offset: r.caches.first().map_or(0, |c| c.offset() as usize),
            })
            .collect();
        let tokens = match self.part {
            Part::Tensor | Part::Expert => {
                inputs.eval()?;
                inputs.as_slice::<u32>().to_vec()
            }
            Part::Pipeline { .. } => Vec::new(),
        };
        self.track_entries(&cache_ops);
        let seq = self.formed.seq.get() + 1;
        self.formed.seq.set(seq);
        let check = seq.is_multiple_of(CHECK_EVERY);
        if check {
            let after: Vec<PlanRow> = plan_rows
                .iter()
                .map(|r| PlanRow {
                    offset: r.offset + len,
                    ..*r
                })
                .collect();
            let entries: Vec<u64> = self.entries.borrow().iter().copied().collect();
            let expected = state_fingerprint(seq, &after, &entries, &self.fingerprint, &tokens);
            *self.pending_check.borrow_mut() = Some((seq, expected));
        }
        Ok(StepPlan {
            seq,
            rows: plan_rows,
            len,
            tokens,
            handoff: None,
            output,
            check,
            cache_ops,
        })
    }

    /// The prefix-cache entries every rank holds once `ops` are applied (for the state check).
    fn track_entries(&self, ops: &[CacheOp]) {
        let mut entries = self.entries.borrow_mut();
        for op in ops {
            match *op {
                CacheOp::Save { entry, .. } => entries.insert(entry),
                CacheOp::Evict { entry } => entries.remove(&entry),
                _ => false,
            };
        }
    }

    /// One forward pass over `rows` on every rank; `output`: whether rank 0 needs the logits.
    fn step(
        &self,
        inputs: &Array,
        rows: &mut [Row],
        output: bool,
        cache_ops: Vec<CacheOp>,
    ) -> Result<StepOutput> {
        self.formed.cluster.check()?;
        let plan = self.plan(inputs, rows, output, cache_ops)?;
        let (cluster, seq) = (&self.formed.cluster, plan.seq);
        let h = self.transformer.embed(inputs)?;
        let mut caches = Row::caches(rows);
        match self.part {
            Part::Tensor | Part::Expert => {
                self.verify_pending_check(seq)?;
                cluster.broadcast(&ToWorker::Step(plan))?;
                let h = self.transformer.run_layers(&h, &mut caches)?;
                Ok(match output {
                    true => StepOutput::Logits(self.transformer.head(&h)?),
                    false => StepOutput::Effects(Vec::new()),
                })
            }
            Part::Pipeline { .. } => self.pipeline_step(&h, &mut caches, plan),
        }
    }

    /// Builds rank 0's part of the graph while the last rank still computes the step before
    /// (whose output this one may take as lazy ids), then hands it on (`relay::Leader`): the
    /// workers build theirs while rank 0 computes. The output comes back lazily, received at
    /// the next step or `await_output`.
    fn pipeline_step(
        &self,
        h: &Array,
        caches: &mut [&mut [LayerCache]],
        mut plan: StepPlan,
    ) -> Result<StepOutput> {
        let h = self.transformer.run_layers(h, caches)?;
        let handoff = handoff_for(&h).map_err(Error::Internal)?;
        plan.handoff = Some(handoff);
        let mut computed = LayerCache::states(caches);
        self.verify_pending_check(plan.seq)?;
        computed.extend(self.relay.take_unreceived()?);
        let (seq, output) = (plan.seq, plan.output);
        self.relay.hand_on(&h, computed, plan)?;
        if !output {
            return Ok(StepOutput::Effects(Vec::new()));
        }
        let back = self.relay.output(seq, &h, handoff.relay)?;
        Ok(StepOutput::Logits(self.transformer.head(&back)?))
    }

    /// Compares the workers' fingerprints of an earlier checked step with rank 0's.
    /// Only a check of a step before `current` is due: the current one's comes after it.
    fn verify_pending_check(&self, current: u64) -> Result<()> {
        let due = matches!(*self.pending_check.borrow(), Some((seq, _)) if seq < current);
        let Some((seq, expected)) = due
            .then(|| self.pending_check.borrow_mut().take())
            .flatten()
        else {
            return Ok(());
        };
        let cluster = &self.formed.cluster;
        // A check older than this one was never waited for (its request ended first).
        cluster.forget(|msg| matches!(msg, ToLeader::Check { seq: s, .. } if *s < seq));
        cluster.collect("the state check", CHECK_TIMEOUT, |rank, msg| {
            state_check(rank, msg, seq, &expected)
        })?;
        Ok(())
    }
}

/// How long rank 0 waits for the workers' fingerprints of a checked step.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Takes `rank`'s fingerprint of step `seq` if it is `expected`; another fingerprint is the
/// divergence error; other replies are not this wait's.
fn state_check(rank: usize, msg: &ToLeader, seq: u64, expected: &str) -> Result<Option<()>> {
    match msg {
        ToLeader::Check { seq: s, state, .. } if *s == seq => match state == expected {
            true => Ok(Some(())),
            false => Err(Error::Distributed(format!(
                "rank {rank} diverged from rank 0 at step {seq}; the request was stopped and \
                 every rank starts the next one from a clean state"
            ))),
        },
        _ => Ok(None),
    }
}

impl LanguageModel for ShardedModel {
    fn forward_rows(&self, inputs: &Array, rows: &mut [Row], ops: Vec<CacheOp>) -> Result<Array> {
        match self.step(inputs, rows, true, ops)? {
            StepOutput::Logits(logits) => Ok(logits),
            StepOutput::Effects(_) => Err(Error::Internal("a step without output".into())),
        }
    }

    fn prefill(&self, inputs: &Array, row: &mut Row, ops: Vec<CacheOp>) -> Result<()> {
        let caches = &mut *row.caches;
        let mut rows = [Row {
            slot: row.slot,
            caches,
        }];
        let StepOutput::Effects(mut effects) = self.step(inputs, &mut rows, false, ops)? else {
            return Err(Error::Internal("a prefill step with output".into()));
        };
        effects.extend(
            row.caches
                .iter()
                .flat_map(|c| c.state().into_iter().cloned()),
        );
        Ok(mlx_rs::transforms::eval(&effects)?)
    }

    fn kv_bytes_per_position(&self) -> usize {
        self.transformer.kv_bytes_per_position(&self.kv)
    }

    fn kv_bytes(&self, positions: usize, chunk: usize) -> usize {
        self.transformer.kv_bytes(&self.kv, positions, chunk)
    }

    fn layer_caches(&self) -> Vec<CacheKind> {
        self.transformer.layer_caches()
    }

    fn model_windows(&self) -> Vec<i32> {
        self.transformer.model_windows()
    }

    fn kv_format(&self) -> KvFormat {
        self.kv
    }

    fn weight_stats(&self) -> crate::models::common::WeightStats {
        self.transformer.weight_stats()
    }

    fn num_layers(&self) -> usize {
        self.transformer.num_layers()
    }

    /// Tensor and expert modes send the ids to every rank, so they need them on the host; a
    /// pipeline's next step evaluates a queued one, after the last rank says it is ready.
    fn queueing(&self) -> Queueing {
        match self.part {
            Part::Pipeline { .. } => Queueing::NextStep,
            Part::Tensor | Part::Expert => Queueing::HostIds,
        }
    }

    fn await_output(&self) -> Result<()> {
        self.relay.await_output()
    }
}

impl Drop for ShardedModel {
    /// Receives an output nobody read, so the next model's first receive gets its own data.
    fn drop(&mut self) {
        if !self.relay.has_unreceived() || self.formed.cluster.check().is_err() {
            return;
        }
        if let Err(e) = self.await_output() {
            tracing::warn!("receiving the last pipeline step's output: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::distributed::loopback;
    use crate::distributed::wire::write_frame;

    fn check(seq: u64, state: &str) -> ToLeader {
        ToLeader::Check {
            seq,
            state: state.into(),
            times: None,
        }
    }

    /// A worker whose fingerprint of a checked step differs from rank 0's is named; a
    /// fingerprint of another step is not this wait's.
    #[test]
    fn a_state_check_mismatch_names_the_rank_and_step(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let (cluster, mut ends) = loopback(2)?;
        write_frame(&mut ends[0], &check(4, "a"))?;
        write_frame(&mut ends[1], &check(5, "b"))?;
        write_frame(&mut ends[1], &check(4, "a"))?;
        let limit = Duration::from_secs(5);
        cluster.collect("check", limit, |rank, msg| state_check(rank, msg, 4, "a"))?;
        write_frame(&mut ends[0], &check(5, "b"))?;
        let err = cluster
            .collect("check", limit, |rank, msg| state_check(rank, msg, 5, "a"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rank 2 diverged from rank 0 at step 5"),
            "{err}"
        );
        Ok(())
    }
}
