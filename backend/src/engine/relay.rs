//! The pipeline relay, both halves: how one step's activations travel rank 0 → 1 → … → last
//! → rank 0. Rank 0 decides per step whether they go over the MLX group (prefill-size bulk)
//! or inside control messages (decode-size, into each rank's `Inbox`), and says so in
//! `StepPlan.handoff`. Rank 0's half (`Leader`) hands its activations on, lets each rank go
//! and keeps the last rank's output lazy until it is needed; a worker's half (`Stage`) builds
//! its part of the graph on the plan, evaluates when its input is due and hands its output on.
//! Model code sees none of this: it runs layers over an array.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use mlx_rs::Array;

use crate::cache::LayerCache;
use crate::distributed::inbox::bytes_of;
use crate::distributed::link::Link;
use crate::distributed::pipeline::{announce_and_send, receive};
use crate::distributed::protocol::{Payload, Relay, StepPlan, ToLeader, ToWorker};
use crate::distributed::{Cluster, Group, Phase, StepTimes};
use crate::error::{Error, Result};
use crate::models::Transformer;

/// The longest one rank's part of a step may take (a full prefill chunk of a big model on a
/// slow machine); a lost rank is noticed sooner by the heartbeat.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Rank 0's half.
pub(super) struct Leader {
    cluster: Rc<Cluster>,
    group: Rc<Group>,
    /// The last step with output, whose activations the last rank sends back.
    unreceived: RefCell<Option<Unreceived>>,
}

/// A pipeline step's output still in flight: over the group it is received (evaluated) once
/// the last rank says it is ready, before any later receive, so the ring never falls out of
/// step; over control messages its receive waits in MLX for the inbox.
struct Unreceived {
    seq: u64,
    back: Array,
    relay: Relay,
}

impl Leader {
    pub fn new(cluster: Rc<Cluster>, group: Rc<Group>) -> Leader {
        Leader {
            cluster,
            group,
            unreceived: RefCell::new(None),
        }
    }

    /// Sends every worker the plan, evaluates rank 0's part (`computed`, with its activations
    /// `h`) and hands `h` on as the plan's hand-off says.
    pub fn hand_on(&self, h: &Array, computed: Vec<Array>, plan: StepPlan) -> Result<()> {
        let relay = plan
            .handoff
            .ok_or_else(|| Error::Internal("a pipeline step without its hand-off".into()))?
            .relay;
        self.cluster.board().step(0);
        match relay {
            Relay::Group => self.over_group(h, computed, plan),
            Relay::Control => self.over_control(h, computed, plan),
        }
    }

    /// Runs `f`, adding its time to rank 0's `phase`.
    fn timed<T>(&self, phase: Phase, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = f();
        self.cluster.board().add(0, phase, started.elapsed());
        out
    }

    /// The last rank's output of step `seq` (shaped like `h`), lazily: it is received at
    /// the next step, `take_unreceived` or `await_output`.
    pub fn output(&self, seq: u64, h: &Array, relay: Relay) -> Result<Array> {
        let (shape, dtype) = (h.shape(), h.dtype());
        let back = match relay {
            Relay::Group => receive(&self.group, shape, dtype)?,
            Relay::Control => self.cluster.inbox().receive(seq, shape, dtype)?,
        };
        *self.unreceived.borrow_mut() = Some(Unreceived {
            seq,
            back: back.clone(),
            relay,
        });
        Ok(back)
    }

    /// Whether an output is still in flight.
    pub fn has_unreceived(&self) -> bool {
        self.unreceived.borrow().is_some()
    }

    /// The output still in flight, to evaluate before anything else is received: over the
    /// group, once the last rank says it is ready to send it.
    pub fn take_unreceived(&self) -> Result<Option<Array>> {
        let Some(u) = self.unreceived.borrow_mut().take() else {
            return Ok(None);
        };
        if u.relay == Relay::Group {
            self.await_ready(self.group.size() - 1, u.seq)?;
        }
        Ok(Some(u.back))
    }

    /// Receives the output still in flight, if any.
    pub fn await_output(&self) -> Result<()> {
        match self.take_unreceived()? {
            Some(back) => {
                back.eval()?;
                self.cluster.inbox().check()
            }
            None => Ok(()),
        }
    }

    /// Over the group (prefill-size steps): each rank is let go as the one before it sends
    /// (a posted MLX ring receive busy-polls a core, which the computing rank needs).
    fn over_group(&self, h: &Array, mut computed: Vec<Array>, plan: StepPlan) -> Result<()> {
        let (cluster, group, seq) = (&self.cluster, &self.group, plan.seq);
        computed.push(h.clone());
        self.timed(Phase::Communication, || {
            cluster.broadcast(&ToWorker::Step(plan))
        })?;
        self.compute(&computed, seq)?;
        let go = |rank| {
            let msg = ToWorker::Go {
                seq,
                activations: None,
            };
            cluster.send_to(rank, &msg)
        };
        self.timed(Phase::Communication, || {
            announce_and_send(group, h, || go(1))
        })?;
        for rank in 1..group.size() - 1 {
            self.await_ready(rank, seq)?;
            go(rank + 1)?;
        }
        Ok(())
    }

    /// Inside control messages: rank 0 evaluates its part (waiting, blocked, for the last
    /// rank's previous output), then sends its activations to rank 1 and passes each middle
    /// rank's on to the next; every worker has its graph in MLX by then.
    fn over_control(&self, h: &Array, mut computed: Vec<Array>, plan: StepPlan) -> Result<()> {
        let (cluster, seq) = (&self.cluster, plan.seq);
        let out = h.contiguous()?;
        computed.push(out.clone());
        self.timed(Phase::Communication, || {
            cluster.broadcast(&ToWorker::Step(plan))
        })?;
        self.compute(&computed, seq)?;
        let mut activations = Payload(bytes_of(&out)?);
        let last = self.group.size() - 1;
        for rank in 1..last {
            let go = ToWorker::Go {
                seq,
                activations: Some(activations),
            };
            self.timed(Phase::Communication, || cluster.send_to(rank, &go))?;
            activations = self.await_ready(rank, seq)?.ok_or_else(|| {
                Error::Distributed(format!("rank {rank} sent no activations for step {seq}"))
            })?;
        }
        let go = ToWorker::Go {
            seq,
            activations: Some(activations),
        };
        self.timed(Phase::Communication, || cluster.send_to(last, &go))
    }

    /// Evaluates rank 0's part of step `seq`; a failure fails the cluster, whose workers
    /// already have the plan.
    fn compute(&self, computed: &[Array], seq: u64) -> Result<()> {
        let (board, inbox) = (self.cluster.board(), self.cluster.inbox());
        let started = Instant::now();
        let done = mlx_rs::transforms::eval(computed)
            .map_err(Error::from)
            .and_then(|()| inbox.check());
        // The last rank's previous output, received inside this evaluation, was waited for.
        let waited = inbox.take_waited();
        board.add(0, Phase::Waiting, waited);
        board.add(0, Phase::Compute, started.elapsed().saturating_sub(waited));
        if let Err(e) = &done {
            let why = format!("rank 0 could not compute pipeline step {seq}: {e}");
            self.cluster.fail(why);
        }
        done
    }

    /// Waits until `rank` has computed step `seq`: its activations, when they came with it.
    /// An older step's `Ready` (of a step that failed before rank 0 waited) is dropped.
    fn await_ready(&self, rank: usize, seq: u64) -> Result<Option<Payload>> {
        let cluster = &self.cluster;
        cluster.forget(|msg| matches!(msg, ToLeader::Ready { seq: s, .. } if *s < seq));
        self.timed(Phase::Waiting, || {
            cluster.await_from(rank, "a pipeline step", STEP_TIMEOUT, |msg| match msg {
                ToLeader::Ready {
                    seq: s,
                    activations,
                    ..
                } if *s == seq => Some(activations.clone()),
                _ => None,
            })
        })
    }
}

/// A worker's half: its place in one step.
pub(super) struct Stage<'a> {
    pub link: &'a Link,
    pub group: &'a Group,
    /// `[rows, len, hidden]` of the activations it receives and sends.
    pub shape: [i32; 3],
    /// This rank's step times so far, carried on its replies.
    pub times: &'a Cell<StepTimes>,
}

impl Stage<'_> {
    /// Runs this rank's `layers` of step `p` between its input and its output.
    pub fn run(
        &self,
        layers: &dyn Transformer,
        p: &StepPlan,
        caches: &mut [&mut [LayerCache]],
    ) -> Result<()> {
        let handoff = p
            .handoff
            .ok_or_else(|| Error::Distributed("a pipeline step without its hand-off".into()))?;
        let dtype = handoff.dtype.mlx();
        self.times.set(StepTimes {
            steps: self.times.get().steps + 1,
            ..self.times.get()
        });
        match handoff.relay {
            Relay::Group => self.over_group(layers, p, caches, dtype),
            Relay::Control => self.over_control(layers, p, caches, dtype),
        }
    }

    /// Runs `f`, adding its time to this rank's `phase`.
    fn timed<T>(&self, phase: Phase, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = f();
        self.add(phase, started.elapsed());
        out
    }

    fn add(&self, phase: Phase, took: Duration) {
        let mut times = self.times.get();
        times.add(phase, took);
        self.times.set(times);
    }

    fn last(&self) -> bool {
        self.group.rank() + 1 == self.group.size()
    }

    /// Whether this rank's output goes anywhere (the last rank's only when rank 0 wants it).
    fn sends(&self, p: &StepPlan) -> bool {
        !self.last() || p.output
    }

    /// Over the group (prefill-size steps): the graph is built at once, evaluated on `Go` (a
    /// posted ring receive busy-polls a core), and the next rank is told before the send.
    fn over_group(
        &self,
        layers: &dyn Transformer,
        p: &StepPlan,
        caches: &mut [&mut [LayerCache]],
        dtype: mlx_rs::Dtype,
    ) -> Result<()> {
        let h = receive(self.group, &self.shape, dtype)?;
        let h = layers.run_layers(&h, caches)?;
        let mut computed = LayerCache::states(caches);
        computed.push(h.clone());
        self.timed(Phase::Waiting, || self.await_go(p.seq))?;
        self.timed(Phase::Compute, || mlx_rs::transforms::eval(&computed))?;
        if !self.sends(p) {
            return Ok(());
        }
        self.timed(Phase::Communication, || {
            announce_and_send(self.group, &h, || {
                let ready = ToLeader::Ready {
                    seq: p.seq,
                    activations: None,
                    times: Some(self.times.get()),
                };
                self.link.send(&ready).map_err(rank_0_gone)
            })
        })
    }

    /// Inside control messages: the whole graph goes to MLX at once, its receive waiting
    /// (blocked) for the activations in rank 0's `Go`; the output goes back to rank 0.
    fn over_control(
        &self,
        layers: &dyn Transformer,
        p: &StepPlan,
        caches: &mut [&mut [LayerCache]],
        dtype: mlx_rs::Dtype,
    ) -> Result<()> {
        let inbox = self.link.inbox();
        let h = inbox.receive(p.seq, &self.shape, dtype)?;
        let out = layers.run_layers(&h, caches)?.contiguous()?;
        let mut computed = LayerCache::states(caches);
        computed.push(out.clone());
        let started = Instant::now();
        mlx_rs::transforms::eval(&computed)?;
        // The input came inside this evaluation: the time its receive blocked was waiting.
        let waited = inbox.take_waited();
        self.add(Phase::Waiting, waited);
        self.add(Phase::Compute, started.elapsed().saturating_sub(waited));
        inbox.check()?;
        if !self.sends(p) {
            return Ok(());
        }
        let (activations, times) = (Payload(bytes_of(&out)?), Some(self.times.get()));
        let msg = match self.last() {
            true => ToLeader::Output {
                seq: p.seq,
                activations,
                times,
            },
            false => ToLeader::Ready {
                seq: p.seq,
                activations: Some(activations),
                times,
            },
        };
        self.timed(Phase::Communication, || self.link.send(&msg))
            .map_err(rank_0_gone)
    }

    /// Waits for rank 0's word that the previous rank is sending step `seq`'s activations:
    /// the graph is built meanwhile, and nothing polls.
    fn await_go(&self, seq: u64) -> Result<()> {
        match self.link.next_message() {
            Some(ToWorker::Go { seq: s, .. }) if s == seq => Ok(()),
            Some(other) => Err(Error::Distributed(format!(
                "expected the go of pipeline step {seq}, got {other:?}"
            ))),
            None => Err(Error::Distributed("rank 0 went away".into())),
        }
    }
}

fn rank_0_gone(e: std::io::Error) -> Error {
    Error::Distributed(format!("rank 0 went away: {e}"))
}
