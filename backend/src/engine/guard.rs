//! Panic guards: a panicking command fails alone, and a panic that escapes the engine thread
//! is published as `Failed`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, RwLock};

use super::batch::Batch;
use super::core::{run, Channel, EngineThread, Serving};
use super::shared::{EngineState, Snapshot};
use crate::error::Error;

/// Runs the engine thread; a panic that escapes it (one the command guards could not hold)
/// is published as `Failed`, so Health tells the host to restart the backend.
pub fn run_guarded(channel: Channel, shared: Arc<RwLock<Snapshot>>) {
    let publish_to = shared.clone();
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(channel, shared))) {
        let msg = format!("the engine thread failed: {}", panic_message(&*panic));
        tracing::error!("{msg}; restart the backend");
        if let Ok(mut s) = publish_to.write() {
            *s = Snapshot {
                state: EngineState::Failed,
                last_error: Some(msg),
                ..Snapshot::default()
            };
        }
    }
}

/// What a panic payload says.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `f`; a panic becomes `Err` with its message, so one bad command cannot end the thread.
pub(super) fn guard<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

impl EngineThread {
    /// A round panicked: its requests fail with INTERNAL naming the panic. Over a cluster the
    /// ranks may be out of step, so the engine degrades; alone it keeps the model, unless
    /// releasing the requests' caches panics too.
    pub(super) fn after_panic(&mut self, panic: &str) {
        let msg = format!("the engine panicked in a generation step: {panic}");
        tracing::error!("{msg}");
        if self.serving.on_cluster() {
            return self.degrade(&msg);
        }
        let e = Error::Internal(msg.clone());
        if guard(|| self.fail_all(&e)).is_err() {
            self.batch = Batch::default();
            self.serving = Serving::Empty;
            crate::memory::release();
            self.publish(|s| {
                *s = Snapshot {
                    state: EngineState::Error,
                    last_error: Some(format!("{msg}; the model was dropped: LoadModel again")),
                    load_wait: s.load_wait.take(),
                    ..Snapshot::default()
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in a command becomes an error naming it, whether its message was a literal
    /// or formatted, so the engine thread can fail that command and go on.
    #[test]
    fn guard_turns_a_panic_into_its_message() {
        let literal = guard(|| -> u8 { panic!("attempt to divide by zero") });
        assert_eq!(literal, Err("attempt to divide by zero".to_string()));
        let formatted = guard(|| -> u8 { panic!("head_dim {}", 0) });
        assert_eq!(formatted, Err("head_dim 0".to_string()));
        assert_eq!(guard(|| 7), Ok(7));
    }
}
