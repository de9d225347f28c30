//! Helper threads that take a share of a product's weight rows. They spin briefly between
//! products (a decode step calls hundreds back to back), then park.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};

use crate::kernel::{columns, Gemm};

/// Below this many weight elements a product runs on the calling thread alone.
const PARALLEL_MIN: usize = 64 * 1024;
/// Spins before a helper parks (about 50-100 µs).
const SPINS: u32 = 20_000;

struct Helper {
    thread: Thread,
    sleeping: AtomicBool,
}

struct Pool {
    /// Held while a product is shared out; a second caller computes alone.
    busy: Mutex<()>,
    /// The current product; written only under `busy` before `epoch` moves.
    job: UnsafeCell<Gemm>,
    epoch: AtomicU64,
    done: AtomicUsize,
    helpers: OnceLock<Vec<Helper>>,
}

// `job` is published through `epoch` (release/acquire) and read only until `done` says so.
unsafe impl Sync for Pool {}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

/// Threads a product is split over, the caller included: `MLX_DISTRIBUTED_GEMM_THREADS`, or
/// every core.
fn threads() -> usize {
    std::env::var("MLX_DISTRIBUTED_GEMM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 16)
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            busy: Mutex::new(()),
            job: UnsafeCell::new(Gemm {
                m: 0,
                n: 0,
                k: 0,
                alpha: 0.0,
                a: std::ptr::null(),
                lda: 0,
                b: std::ptr::null(),
                ldb: 0,
                b_trans: true,
                beta: 0.0,
                c: std::ptr::null_mut(),
                ldc: 0,
            }),
            epoch: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            helpers: OnceLock::new(),
        }));
        let helpers = (1..threads())
            .map(|i| {
                let t = thread::Builder::new()
                    .name(format!("skinny-gemm-{i}"))
                    .spawn(move || helper_loop(pool, i))
                    .expect("spawning a GEMM helper thread");
                Helper {
                    thread: t.thread().clone(),
                    sleeping: AtomicBool::new(false),
                }
            })
            .collect();
        let _ = pool.helpers.set(helpers);
        pool
    })
}

/// Weight rows `part` of `parts` takes, in whole tiles of 4.
fn share(n: usize, part: usize, parts: usize) -> (usize, usize) {
    let tiles = n.div_ceil(4);
    let at = |p: usize| (tiles * p / parts * 4).min(n);
    (at(part), at(part + 1))
}

/// Computes `g`, split over the helpers when it is big enough and they are free.
pub fn run(g: &Gemm) {
    let pool = pool();
    let helpers = pool.helpers.get().map_or(0, Vec::len);
    let guard = match helpers > 0 && g.n * g.k >= PARALLEL_MIN {
        true => pool.busy.try_lock().ok(),
        false => None,
    };
    let Some(_guard) = guard else {
        unsafe { columns(g, 0, g.n) };
        return;
    };
    let parts = helpers + 1;
    unsafe { *pool.job.get() = *g };
    pool.done.store(0, Relaxed);
    pool.epoch.fetch_add(1, SeqCst);
    for h in pool.helpers.get().into_iter().flatten() {
        if h.sleeping.load(SeqCst) {
            h.thread.unpark();
        }
    }
    let (n0, n1) = share(g.n, 0, parts);
    unsafe { columns(g, n0, n1) };
    let mut spins = 0u32;
    while pool.done.load(Acquire) < helpers {
        spins += 1;
        match spins < SPINS {
            true => std::hint::spin_loop(),
            false => thread::yield_now(),
        }
    }
}

fn helper_loop(pool: &'static Pool, part: usize) {
    // Wait until the helper list (our own entry) is in place.
    let me = loop {
        if let Some(h) = pool.helpers.get() {
            break &h[part - 1];
        }
        thread::yield_now();
    };
    // Helpers exist before the first product, so every epoch after 0 is work for them.
    let mut seen = 0;
    loop {
        let mut spins = 0u32;
        while pool.epoch.load(Acquire) == seen {
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
                continue;
            }
            me.sleeping.store(true, SeqCst);
            if pool.epoch.load(SeqCst) == seen {
                thread::park();
            }
            me.sleeping.store(false, SeqCst);
            spins = 0;
        }
        seen = pool.epoch.load(Acquire);
        let g = unsafe { *pool.job.get() };
        let parts = pool.helpers.get().map_or(0, Vec::len) + 1;
        let (n0, n1) = share(g.n, part, parts);
        unsafe { columns(&g, n0, n1) };
        pool.done.fetch_add(1, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_every_row_once_in_whole_tiles() {
        for n in [1, 3, 4, 5, 17, 49152] {
            for parts in 1..5 {
                let mut next = 0;
                for p in 0..parts {
                    let (a, b) = share(n, p, parts);
                    assert_eq!(a, next);
                    assert!(a % 4 == 0 && a <= b);
                    next = b;
                }
                assert_eq!(next, n);
            }
        }
    }
}
