//! Activations that arrive inside control messages (a pipeline's decode-size steps), waited
//! for by MLX host receives (`quant_cpu::host_receive`): the stream thread blocks until its
//! step's value is here, or the connection it would come over fails. Nothing polls, so the
//! whole graph of a step can be handed to MLX before its input arrives.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mlx_rs::{Array, Dtype};
use quant_cpu::HostSource;

use crate::error::{Error, Result};

/// The longest a receive waits (a full step of a big model on a slow machine); a lost rank
/// closes the inbox much sooner.
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often a waiting receive looks for a stop request.
const STOP_TICK: Duration = Duration::from_millis(100);

#[derive(Default)]
pub struct Inbox {
    mail: Mutex<Mail>,
    arrived: Condvar,
}

#[derive(Default)]
struct Mail {
    /// Values by step, until a receive takes them.
    values: BTreeMap<u64, Vec<u8>>,
    /// Why no more values will come.
    closed: Option<String>,
    /// Why a receive read zeros instead of its value, until `check` reports it.
    failure: Option<String>,
    /// How long receives blocked for their values since `take_waited` (a step's waiting,
    /// which happens inside MLX's evaluation).
    waited: Duration,
}

impl Inbox {
    /// Step `seq`'s value, from the control connection.
    pub fn deliver(&self, seq: u64, bytes: Vec<u8>) {
        let mut mail = self.lock();
        mail.values.insert(seq, bytes);
        self.arrived.notify_all();
    }

    /// No more values will come (the first reason is kept): waiting receives fail now.
    pub fn close(&self, why: &str) {
        let mut mail = self.lock();
        mail.closed.get_or_insert_with(|| why.to_string());
        self.arrived.notify_all();
    }

    /// A lazy array of step `seq`'s value; evaluating it waits for the value.
    pub fn receive(self: &Arc<Self>, seq: u64, shape: &[i32], dtype: Dtype) -> Result<Array> {
        Ok(quant_cpu::host_receive(shape, dtype, self.clone(), seq)?)
    }

    /// Whether every receive evaluated so far got its value; call it after each evaluation
    /// that may hold one, since a receive that failed read zeros.
    pub fn check(&self) -> Result<()> {
        match self.lock().failure.take() {
            Some(why) => Err(Error::Distributed(why)),
            None => Ok(()),
        }
    }

    /// How long receives waited for their values since the last call.
    pub fn take_waited(&self) -> Duration {
        std::mem::take(&mut self.lock().waited)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mail> {
        self.mail.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for step `seq`'s value; older values are dropped (their steps' outputs were
    /// never read).
    fn take(&self, seq: u64) -> std::result::Result<Vec<u8>, String> {
        let started = Instant::now();
        let deadline = started + RECEIVE_TIMEOUT;
        let mut mail = self.lock();
        loop {
            mail.values = mail.values.split_off(&seq);
            if let Some(bytes) = mail.values.remove(&seq) {
                mail.waited += started.elapsed();
                return Ok(bytes);
            }
            if let Some(why) = &mail.closed {
                return Err(format!("the activations of step {seq} never came: {why}"));
            }
            if crate::lifecycle::stop_requested() {
                return Err(format!(
                    "stopped while waiting for step {seq}'s activations"
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "the activations of step {seq} did not come within {} s",
                    RECEIVE_TIMEOUT.as_secs()
                ));
            }
            mail = self
                .arrived
                .wait_timeout(mail, left.min(STOP_TICK))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl HostSource for Inbox {
    fn fill(&self, seq: u64, dst: &mut [u8]) -> bool {
        let failed = match self.take(seq) {
            Ok(bytes) if bytes.len() == dst.len() => {
                dst.copy_from_slice(&bytes);
                return true;
            }
            Ok(bytes) => format!(
                "step {seq}'s activations are {} bytes, the plan's shape takes {}",
                bytes.len(),
                dst.len()
            ),
            Err(why) => why,
        };
        self.lock().failure.get_or_insert(failed);
        false
    }
}

/// The bytes of an evaluated, row-contiguous array, as a host receive takes them.
pub fn bytes_of(a: &Array) -> Result<Vec<u8>> {
    fn raw<T: mlx_rs::ArrayElement>(a: &Array) -> Result<Vec<u8>> {
        let values = a
            .try_as_slice::<T>()
            .map_err(|e| Error::Internal(format!("reading activations: {e}")))?;
        // SAFETY: plain numbers without padding, viewed as the bytes they occupy.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Ok(bytes.to_vec())
    }
    match a.dtype() {
        Dtype::Float32 => raw::<f32>(a),
        Dtype::Float16 => raw::<half::f16>(a),
        Dtype::Bfloat16 => raw::<half::bf16>(a),
        other => Err(Error::Internal(format!(
            "activations of dtype {other:?} cannot be sent"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_waits_for_its_step_and_drops_older_ones() -> Result<()> {
        let inbox = Arc::new(Inbox::default());
        inbox.deliver(3, vec![0; 8]);
        let x = inbox.receive(5, &[2], Dtype::Float32)?;
        let feeder = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                let bytes = [1.5f32, -2.0]
                    .iter()
                    .flat_map(|v| v.to_ne_bytes())
                    .collect();
                inbox.deliver(5, bytes);
            })
        };
        x.eval()?;
        let _ = feeder.join();
        inbox.check()?;
        assert_eq!(x.as_slice::<f32>(), &[1.5, -2.0]);
        assert_eq!(bytes_of(&x)?.len(), 8);
        assert!(inbox.lock().values.is_empty());
        Ok(())
    }

    #[test]
    fn closing_fails_a_waiting_receive_and_check_names_why() -> Result<()> {
        let inbox = Arc::new(Inbox::default());
        let x = inbox.receive(1, &[4], Dtype::Float32)?;
        let closer = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                inbox.close("rank 1 was lost");
            })
        };
        x.eval()?;
        let _ = closer.join();
        let Err(e) = inbox.check() else {
            panic!("a closed inbox must fail the receive");
        };
        assert!(e.to_string().contains("rank 1 was lost"), "{e}");
        assert_eq!(x.as_slice::<f32>(), &[0.0; 4]);
        Ok(())
    }

    #[test]
    fn a_value_of_the_wrong_size_is_refused() -> Result<()> {
        let inbox = Arc::new(Inbox::default());
        inbox.deliver(1, vec![0; 3]);
        inbox.receive(1, &[1], Dtype::Float32)?.eval()?;
        assert!(inbox.check().is_err());
        Ok(())
    }
}
