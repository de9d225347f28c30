//! Rank 0's view of a model spread over the cluster. Each forward pass first sends every
//! worker a step plan, then runs rank 0's part; workers never sample and never decide.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use mlx_rs::Array;

use crate::cache::KvCache;
use crate::distributed::leader::Cluster;
use crate::distributed::pipeline::{dtype_name, pass_on, receive};
use crate::distributed::protocol::{state_fingerprint, Part, StepPlan, ToLeader, ToWorker};
use crate::distributed::Group;
use crate::error::{Error, Result};
use crate::models::common::Decoder;
use crate::models::LanguageModel;

/// Every this many steps, the ranks compare a fingerprint of their state.
const CHECK_EVERY: u64 = 16;

/// The cluster's shared pieces, kept across loads while no rank is lost.
pub struct Session {
    pub cluster: Rc<Cluster>,
    pub group: Rc<Group>,
    pub hostfile_digest: String,
}

pub struct ShardedModel {
    pub decoder: Decoder,
    pub session: Rc<Session>,
    pub part: Part,
    pub fingerprint: String,
    seq: Cell<u64>,
    /// The current sequence's token ids (tensor mode, for the fingerprint).
    tokens: RefCell<Vec<u32>>,
    pending_check: RefCell<Option<(u64, String)>>,
}

/// What one step leaves to evaluate: the logits, or (prefill) only side effects.
enum StepOutput {
    Logits(Array),
    Effects(Vec<Array>),
}

impl ShardedModel {
    pub fn new(decoder: Decoder, session: Rc<Session>, part: Part, fingerprint: String) -> Self {
        ShardedModel {
            decoder,
            session,
            part,
            fingerprint,
            seq: Cell::new(0),
            tokens: RefCell::new(Vec::new()),
            pending_check: RefCell::new(None),
        }
    }

    fn step(&self, inputs: &Array, caches: &mut [KvCache], output: bool) -> Result<StepOutput> {
        let cluster = &self.session.cluster;
        cluster.check()?;
        self.verify_pending_check()?;
        let offset = caches.first().map_or(0, |c| c.offset() as usize);
        let len = inputs.shape()[1] as usize;
        let tokens = match self.part {
            Part::Tensor => {
                inputs.eval()?;
                inputs.as_slice::<u32>().to_vec()
            }
            Part::Pipeline { .. } => Vec::new(),
        };
        if offset == 0 {
            self.tokens.borrow_mut().clear();
        }
        self.tokens.borrow_mut().extend(&tokens);
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        let check = seq % CHECK_EVERY == 0;
        let h = self.decoder.embed(inputs)?;
        cluster.broadcast(&ToWorker::Step(StepPlan {
            seq,
            offset,
            len,
            tokens,
            dtype: dtype_name(h.dtype()).into(),
            output,
            check,
        }))?;
        if check {
            let expected =
                state_fingerprint(seq, offset + len, &self.fingerprint, &self.tokens.borrow());
            *self.pending_check.borrow_mut() = Some((seq, expected));
        }
        let h = self.decoder.run_layers(&h, caches)?;
        match self.part {
            Part::Tensor if output => Ok(StepOutput::Logits(self.decoder.head(&h)?)),
            Part::Tensor => Ok(StepOutput::Effects(Vec::new())),
            Part::Pipeline { .. } => {
                let group = &self.session.group;
                let sent = pass_on(group, &h)?;
                if !output {
                    return Ok(StepOutput::Effects(vec![sent]));
                }
                let back = receive(group, h.shape(), h.dtype())?;
                let back = mlx_rs::raw::depends(&[back], &[sent])?.remove(0);
                Ok(StepOutput::Logits(self.decoder.head(&back)?))
            }
        }
    }

    /// Compares the workers' fingerprints of an earlier checked step with rank 0's.
    fn verify_pending_check(&self) -> Result<()> {
        let Some((seq, expected)) = self.pending_check.borrow_mut().take() else {
            return Ok(());
        };
        self.session
            .cluster
            .collect(
                "the state check",
                Duration::from_secs(10),
                |rank, msg| match msg {
                    ToLeader::Check { seq: s, state } if s == seq => match state == expected {
                        true => Ok(Some(())),
                        false => Err(Error::Distributed(format!(
                    "rank {rank} diverged from rank 0 at step {seq}; the request was stopped and \
                     every rank starts the next one from a clean state"
                ))),
                    },
                    _ => Ok(None),
                },
            )?;
        Ok(())
    }
}

impl LanguageModel for ShardedModel {
    fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array> {
        match self.step(inputs, caches, true)? {
            StepOutput::Logits(logits) => Ok(logits),
            StepOutput::Effects(_) => Err(Error::Internal("a step without output".into())),
        }
    }

    fn prefill(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<()> {
        let StepOutput::Effects(mut effects) = self.step(inputs, caches, false)? else {
            return Err(Error::Internal("a prefill step with output".into()));
        };
        effects.extend(caches.iter().flat_map(|c| c.state().into_iter().cloned()));
        Ok(mlx_rs::transforms::eval(&effects)?)
    }

    fn num_layers(&self) -> usize {
        self.decoder.layers.len()
    }

    fn lazy_inputs(&self) -> bool {
        matches!(self.part, Part::Pipeline { .. })
    }
}
