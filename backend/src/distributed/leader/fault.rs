//! The first fault a cluster sees (a lost, silent or failed rank), and who to tell: the engine
//! thread's listener, the status observer, the inbox of activations, and a watchdog that ends
//! a process left blocked in MLX.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::distributed::inbox::Inbox;

/// After a fault, how long the engine may stay blocked in MLX before rank 0 exits so that
/// the host restarts it (a collective with a vanished peer may never return).
const WEDGED_EXIT_AFTER: Duration = Duration::from_secs(20);

type Listener = Box<dyn FnOnce(String) + Send>;
type Observer = Box<dyn Fn(&str) + Send>;

/// The first fault seen, and who to tell.
#[derive(Default)]
pub struct Fault {
    message: Mutex<Option<String>>,
    listener: Mutex<Option<Listener>>,
    observer: Mutex<Option<Observer>>,
    /// A request is running on the engine thread.
    busy: Arc<AtomicBool>,
    /// The last rank's outputs that came in control messages; closed on the first fault, so
    /// a receive blocked on a lost rank returns.
    inbox: Arc<Inbox>,
}

impl Fault {
    /// Records the first fault and tells everyone; later ones are ignored.
    pub(super) fn raise(&self, message: String) {
        let mut slot = self.message.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return;
        }
        tracing::error!("{message}");
        *slot = Some(message.clone());
        drop(slot);
        self.inbox.close(&message);
        if let Some(observe) = self
            .observer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            observe(&message);
        }
        if self.busy.load(Ordering::SeqCst) {
            let busy = self.busy.clone();
            std::thread::spawn(move || {
                std::thread::sleep(WEDGED_EXIT_AFTER);
                if busy.load(Ordering::SeqCst) {
                    tracing::error!(
                        "the engine is still blocked in MLX {} s after a rank was lost; exiting so \
                         that the host restarts this backend",
                        WEDGED_EXIT_AFTER.as_secs()
                    );
                    // Not `exit`: its destructors would race the MLX work that is stuck.
                    crate::lifecycle::exit_now(crate::lifecycle::EXIT_STUCK);
                }
            });
        }
        if let Some(tell) = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            tell(message);
        }
    }

    /// The last rank's outputs that come in control messages; closed by the first fault.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    pub fn get(&self) -> Option<String> {
        self.message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Calls `tell` once, on the next fault (or now, if there is one already).
    pub fn on_fault(&self, tell: Listener) {
        match self.get() {
            Some(message) => tell(message),
            None => *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(tell),
        }
    }

    /// Calls `observe` on every fault (to publish the degraded state).
    pub fn observe(&self, observe: Observer) {
        *self.observer.lock().unwrap_or_else(|e| e.into_inner()) = Some(observe);
    }

    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::SeqCst);
    }

    pub fn clear_listener(&self) {
        self.listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}
