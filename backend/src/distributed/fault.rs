//! The first fault a cluster sees (a lost, silent or failed rank), and who hears of it: the
//! owner's command channel (a post), the requests of the step running (told at once, since the
//! engine thread may be blocked in MLX), the inbox of activations, and a watchdog that ends a
//! process left blocked in MLX.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::distributed::inbox::Inbox;
use crate::error::Error;
use crate::request::Events;

/// After a fault, how long the engine may stay blocked in MLX before rank 0 exits so that
/// the host restarts it (a collective with a vanished peer may never return).
const WEDGED_EXIT_AFTER: Duration = Duration::from_secs(20);

/// Puts a "your cluster has a fault" command on the owner's channel; the owner reads the
/// message with `Fault::get` when it takes the command.
pub type Post = Box<dyn Fn() + Send>;

/// The first fault seen, and who hears of it.
#[derive(Default)]
pub struct Fault {
    message: Mutex<Option<String>>,
    post: Mutex<Option<Post>>,
    /// The requests of the step running on the engine thread, while one runs.
    running: Mutex<Option<Vec<Events>>>,
    /// A step is running (read by the watchdog's thread).
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
        if let Some(post) = self.post.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            post();
        }
        if let Some(running) = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            fail(running, &message);
        }
        if self.busy.load(Ordering::SeqCst) {
            watch_for_a_wedged_step(self.busy.clone());
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

    /// How the owner hears of the first fault (or at once, if there is one already).
    pub fn post_to(&self, post: Post) {
        let mut slot = self.post.lock().unwrap_or_else(|e| e.into_inner());
        if self.get().is_some() {
            post();
        }
        *slot = Some(post);
    }

    /// A step of `running` starts on the engine thread: a fault fails them at once (or now,
    /// if there is one already) and arms the watchdog.
    pub fn step_started(&self, running: Vec<Events>) {
        self.busy.store(true, Ordering::SeqCst);
        let mut slot = self.running.lock().unwrap_or_else(|e| e.into_inner());
        match self.get() {
            Some(message) => fail(running, &message),
            None => *slot = Some(running),
        }
    }

    /// The step has returned: nothing is blocked in MLX.
    pub fn step_ended(&self) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.busy.store(false, Ordering::SeqCst);
    }
}

/// The watchdog, started by the first fault if a step is running: a process still blocked in
/// MLX `WEDGED_EXIT_AFTER` later exits, so that the host restarts it.
fn watch_for_a_wedged_step(busy: Arc<AtomicBool>) {
    let watch = move || {
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
    };
    if let Err(e) = std::thread::Builder::new()
        .name("fault-watchdog".into())
        .spawn(watch)
    {
        tracing::warn!("cannot start the fault watchdog: {e}");
    }
}

/// Ends `running` with the fault (each send returns at once: the channels are unbounded).
fn fail(running: Vec<Events>, message: &str) {
    for events in running {
        let _ = events.send(Err(Error::RankLost(message.to_string())));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use tokio::sync::mpsc as tmpsc;

    use super::*;
    use crate::request::Event;

    type Rx = tmpsc::UnboundedReceiver<crate::error::Result<Event>>;

    fn running(n: usize) -> (Vec<Events>, Vec<Rx>) {
        (0..n).map(|_| tmpsc::unbounded_channel()).unzip()
    }

    fn lost(rx: &mut Rx) -> Option<String> {
        match rx.try_recv() {
            Ok(Err(Error::RankLost(m))) => Some(m),
            _ => None,
        }
    }

    /// A fault during a step fails its requests at once and posts once to the owner; a second
    /// fault changes nothing.
    #[test]
    fn a_fault_mid_step_fails_the_running_requests_and_posts_once() {
        let fault = Fault::default();
        let (post, posted) = mpsc::channel();
        fault.post_to(Box::new(move || {
            let _ = post.send(());
        }));
        let (events, mut rxs) = running(2);
        fault.step_started(events);
        fault.raise("rank 1 was lost".into());
        fault.raise("rank 2 was lost".into());
        fault.step_ended();
        for rx in &mut rxs {
            assert_eq!(lost(rx).as_deref(), Some("rank 1 was lost"));
        }
        assert_eq!(posted.try_iter().count(), 1);
        assert_eq!(fault.get().as_deref(), Some("rank 1 was lost"));
    }

    /// A fault between rounds fails nothing running; the next step's requests fail when it
    /// starts, and an owner that registers late hears of it at once.
    #[test]
    fn a_fault_between_rounds_reaches_the_next_step_and_a_late_owner() {
        let fault = Fault::default();
        let (events, mut first) = running(1);
        fault.step_started(events);
        fault.step_ended();
        fault.raise("rank 1 stopped answering".into());
        assert_eq!(lost(&mut first[0]), None, "the step had ended");
        let (events, mut next) = running(1);
        fault.step_started(events);
        assert_eq!(
            lost(&mut next[0]).as_deref(),
            Some("rank 1 stopped answering")
        );
        fault.step_ended();
        let (post, posted) = mpsc::channel();
        fault.post_to(Box::new(move || {
            let _ = post.send(());
        }));
        assert_eq!(posted.try_iter().count(), 1);
    }
}
