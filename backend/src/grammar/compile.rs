//! Where a request's grammar compiles: on a thread of its own whose stack fits the deepest
//! walk `bounds` allows (a stack overflow aborts the process, and nothing can catch it),
//! behind a gate of `slots()` compiles at once, so that grammars cannot take every core or
//! hold memory without bound, and a request without one never waits behind them. A compile
//! stops at its next phase once its caller has gone, and one still waiting for a slot never
//! starts. A panic inside llguidance fails that request only.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Constraint, Grammars};
use crate::error::{Error, Result};

/// The compile thread's stack: llguidance's deepest walk at `bounds::MAX_DEPTH` levels
/// measured 1.7 MiB (about 3.3 KiB a level; see docs/limits.md), nine times over. Pages
/// never touched cost nothing.
pub const STACK_BYTES: usize = 16 << 20;

/// The longest message a grammar's error gives its client: llguidance may quote a grammar.
const MAX_MESSAGE: usize = 512;

/// Compiles waiting for a slot and compiling now, process-wide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CompileCounts {
    pub queued: usize,
    pub running: usize,
}

/// The gate: `slots()` permits, and the counts Status reports.
struct Gate {
    permits: Arc<Semaphore>,
    queued: AtomicUsize,
    running: AtomicUsize,
}

fn gate() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(|| Gate {
        permits: Arc::new(Semaphore::new(slots())),
        queued: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
    })
}

/// Grammar compiles at once: half the cores, at least one, so that the engine thread and
/// requests without a grammar keep the rest.
pub fn slots() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).max(1)
}

/// How many compiles wait and run now.
pub fn counts() -> CompileCounts {
    let gate = gate();
    CompileCounts {
        queued: gate.queued.load(Ordering::Relaxed),
        running: gate.running.load(Ordering::Relaxed),
    }
}

/// One count held for as long as the value lives.
struct Counted(&'static AtomicUsize);

impl Counted {
    fn new(count: &'static AtomicUsize) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Set once the compile's caller has gone; the compile checks it between phases.
#[derive(Debug, Clone, Default)]
pub(super) struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub(super) fn check(&self) -> Result<()> {
        match self.0.load(Ordering::Relaxed) {
            true => Err(Error::Aborted(
                "the request left before its grammar compiled".into(),
            )),
            false => Ok(()),
        }
    }
}

/// Cancels its compile when dropped: the gRPC handler's future is dropped when its client
/// cancels or its deadline passes, and this with it.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0 .0.store(true, Ordering::Relaxed);
    }
}

impl Grammars {
    /// Compiles a request's GBNF grammar behind the gate, on a thread of its own, once it
    /// parses within the limits; dropping the future (the client left) skips a compile
    /// still waiting for a slot and stops a running one at its next phase.
    pub async fn compile_gated(self: Arc<Self>, gbnf: String) -> Result<Constraint> {
        let gbnf = checked(gbnf).await?;
        let gate = gate();
        let queued = Counted::new(&gate.queued);
        let permit = gate
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| Error::Internal(format!("the grammar gate is closed: {e}")))?;
        drop(queued);
        let cancel = Cancel::default();
        let _leave = CancelOnDrop(cancel.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = move || {
            let slot: OwnedSemaphorePermit = permit;
            let running = Counted::new(&gate.running);
            let result = guarded(|| self.compile_here(&gbnf, &cancel));
            drop(gbnf);
            // A caller that left drops the result here, before the trim.
            let _ = tx.send(result);
            crate::memory::trim_heap();
            drop((running, slot));
        };
        spawn(job)?;
        rx.await.map_err(|_| {
            Error::Internal("the grammar compile thread ended without a result".into())
        })?
    }

    /// Compiles a GBNF grammar on a thread of its own, waiting for it here, without the gate:
    /// for callers outside the async runtime (tests, tools).
    pub fn compile(&self, gbnf: &str) -> Result<Constraint> {
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("grammar".into())
                .stack_size(STACK_BYTES)
                .spawn_scoped(scope, || {
                    guarded(|| self.compile_here(gbnf, &Cancel::default()))
                })
                .map_err(|e| Error::Internal(format!("cannot start a grammar thread: {e}")))?;
            worker
                .join()
                .map_err(|_| Error::Internal("the grammar thread failed".into()))?
        })
    }
}

/// The grammar, once it parses within the limits (on a blocking thread: a megabyte takes
/// milliseconds), so a grammar refused anyway never waits for the gate.
async fn checked(gbnf: String) -> Result<String> {
    let check = move || super::gbnf::check(&gbnf).map(|()| gbnf);
    tokio::task::spawn_blocking(check)
        .await
        .map_err(|e| Error::Internal(format!("checking the grammar failed: {e}")))?
        .map_err(|e| Error::InvalidRequest(short(format!("Grammar: {e}"))))
}

/// Starts `job` on a thread with the compile stack.
fn spawn(job: impl FnOnce() + Send + 'static) -> Result<()> {
    std::thread::Builder::new()
        .name("grammar".into())
        .stack_size(STACK_BYTES)
        .spawn(job)
        .map(|_| ())
        .map_err(|e| Error::Internal(format!("cannot start a grammar thread: {e}")))
}

/// Runs a compile, turning a panic into an INTERNAL error with a short message: the panic's
/// text goes to the log, never to the client. Messages are cut to `MAX_MESSAGE` bytes.
fn guarded(compile: impl FnOnce() -> Result<Constraint>) -> Result<Constraint> {
    match catch_unwind(AssertUnwindSafe(compile)) {
        Ok(Ok(constraint)) => Ok(constraint),
        Ok(Err(Error::InvalidRequest(message))) => Err(Error::InvalidRequest(short(message))),
        Ok(Err(e)) => Err(e),
        Err(payload) => {
            tracing::error!(panic = %panic_text(&*payload), "a grammar compile panicked");
            Err(Error::Internal(
                "the grammar compiler failed on this grammar (details in the backend's log)".into(),
            ))
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// `message` cut to `MAX_MESSAGE` bytes at a character boundary, marked where cut.
pub(super) fn short(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" [...]");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake;
    #[cfg(target_os = "linux")]
    use crate::grammar::{Mask, MAX_DEPTH};

    fn grammars() -> Grammars {
        let tok = fake::tokenizer();
        let eos = *tok.eos_ids().first().expect("an eos id");
        Grammars::new(&fake::fixture_dir(), fake::VOCAB as usize, &[eos], &[])
    }

    #[cfg(target_os = "linux")]
    const PAINT: u64 = 0x5a5a_5a5a_5a5a_5a5a;

    /// The bytes of stack `run` uses below this frame: the free stack is painted first, and
    /// the lowest word it changed found after (Linux: glibc's `pthread_getattr_np`).
    #[cfg(target_os = "linux")]
    fn stack_used<T>(run: impl FnOnce() -> T) -> (T, usize) {
        // SAFETY: the range painted and read lies inside this thread's own stack mapping,
        // between its lowest 64 KiB (guard and margin) and 16 KiB below this frame, which
        // nothing live occupies while this function runs; volatile keeps the writes.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let (mut base, mut size) = (std::ptr::null_mut(), 0usize);
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut base, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            let marker = 0u8;
            let top = (&marker as *const u8 as usize - (16 << 10)) & !7;
            let low = base as usize + (64 << 10);
            for p in (low..top).step_by(8) {
                std::ptr::write_volatile(p as *mut u64, PAINT);
            }
            let out = run();
            let lowest = (low..top)
                .step_by(8)
                .find(|&p| std::ptr::read_volatile(p as *const u64) != PAINT)
                .unwrap_or(top);
            (out, top - lowest + (16 << 10))
        }
    }

    /// Grammars at the depth limit in each shape llguidance walks deeply: a chain of
    /// terminals, a cycle of rules, groups nested in rules, and terminals nested in
    /// terminals (deep regexes, whose masks the engine thread computes).
    #[cfg(target_os = "linux")]
    fn at_the_limit() -> Vec<(&'static str, String)> {
        let n = MAX_DEPTH - 2;
        let mut terminals = String::from("root ::= r0\n");
        let mut cycle = String::from("root ::= r0\n");
        let mut nested = String::from("root ::= r0 \"!\"\n");
        for i in 0..n {
            terminals.push_str(&format!("r{i} ::= r{}\n", i + 1));
            cycle.push_str(&format!("r{i} ::= r{} | \"(\" root \")\"\n", i + 1));
            nested.push_str(&format!("r{i} ::= \"(\" r{} \")\"\n", i + 1));
        }
        for g in [&mut terminals, &mut cycle, &mut nested] {
            g.push_str(&format!("r{n} ::= \"a\"\n"));
        }
        let levels = crate::grammar::MAX_NESTING;
        let mut groups = String::from("root ::= g0\n");
        let rules = MAX_DEPTH / (levels + 1) - 1;
        for i in 0..rules {
            let inner = format!("g{} \"x\"", i + 1);
            let body = format!("{}{inner}{}", "(".repeat(levels), ")".repeat(levels));
            groups.push_str(&format!("g{i} ::= {body} | <[1]>\n"));
        }
        groups.push_str(&format!("g{rules} ::= \"a\"\n"));
        vec![
            ("terminals", terminals),
            ("cycle", cycle),
            ("nested", nested),
            ("groups", groups),
        ]
    }

    /// The deepest grammars the limits allow compile, and compute masks, within a quarter
    /// of the compile thread's stack; the measure is printed (docs/limits.md quotes it).
    #[test]
    #[cfg(target_os = "linux")]
    fn the_deepest_grammars_fit_a_quarter_of_the_stack() {
        let g = grammars();
        g.compile("root ::= \"warm\"").expect("the compiler builds");
        for (shape, text) in at_the_limit() {
            let (used, mask_used) = std::thread::scope(|s| {
                let run = std::thread::Builder::new()
                    .stack_size(STACK_BYTES)
                    .spawn_scoped(s, || {
                        let (c, used) = stack_used(|| g.compile_here(&text, &Cancel::default()));
                        let mut c = c.unwrap_or_else(|e| panic!("{shape}: {e}"));
                        let (mask, mask_used) = stack_used(|| c.mask());
                        assert!(matches!(mask, Mask::Only(_)), "{shape}");
                        (used, mask_used)
                    });
                run.expect("a thread").join().expect("no panic")
            });
            eprintln!(
                "{shape}: compile {} KiB, mask {} KiB",
                used >> 10,
                mask_used >> 10
            );
            assert!(used < STACK_BYTES / 4, "{shape}: {used}");
            assert!(mask_used < 256 << 10, "{shape}: mask {mask_used}");
        }
    }

    /// A panic in a compile is INTERNAL with a short message, its text kept from it.
    #[test]
    fn a_panic_is_internal_without_its_text() {
        let err = guarded(|| panic!("grammar.symbols.len() < u16::MAX")).err();
        let text = err.map(|e| (matches!(e, Error::Internal(_)), e.to_string()));
        let (internal, text) = text.expect("an error");
        assert!(
            internal && !text.contains("symbols") && text.len() < 200,
            "{text}"
        );
    }

    /// A compile whose caller left stops at its next phase; long messages are cut.
    #[test]
    fn a_cancelled_compile_stops_and_messages_are_short() {
        let g = grammars();
        let cancel = Cancel::default();
        drop(CancelOnDrop(cancel.clone()));
        let err = g.compile_here("root ::= \"a\"", &cancel).err();
        assert!(matches!(err, Some(Error::Aborted(_))), "{err:?}");
        let long = g.compile(&format!("root ::= {}", "x".repeat(5000))).err();
        let long = long.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            long.contains("is not defined") && long.len() < 600,
            "{long}"
        );
    }
}
