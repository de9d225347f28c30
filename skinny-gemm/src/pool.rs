//! Helper threads that take chunks of a product's weight rows (this crate's f32 products, and
//! any other few-row product split by output columns: `quant-cpu`'s). The caller claims chunks too,
//! so a helper that is not running (a busy box, another rank's process) never stalls it. They
//! spin briefly between products (a decode step calls hundreds back to back), then park.
//! `shutdown` stops and joins them before the process exits; products after it run on the
//! calling thread alone.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};

use crate::kernel::{columns, Gemm};

/// Below this many weight elements a product runs on the calling thread alone.
const PARALLEL_MIN: usize = 64 * 1024;
/// Spins before a helper parks (about 50-100 µs).
const SPINS: u32 = 20_000;
/// Chunks a thread takes from a product, on average: each chunk is `1 / (CHUNKS_PER_THREAD ·
/// threads)` of its tiles. On the AMX Xeon (a KVM guest) every claim and every chunk's
/// restarted prefetch stream cost more than the wait for a slower thread's last chunk: against
/// chunks shrinking to a 32nd of the product, SmolLM2-135M decoded 3-7% faster (int8 and
/// exact) and a 3.87 B model 2% (docs/benchmarks.md).
const CHUNKS_PER_THREAD: usize = 2;

struct Helper {
    thread: Thread,
    sleeping: AtomicBool,
}

/// Whether the helpers take work, or have been told to end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Running = 0,
    Stopped = 1,
}

/// Work split by output columns: `columns(n0, n1)` computes columns `n0..n1` of `n`.
type Columns<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// The current job: the caller's closure, with its lifetime erased. It stays valid because the
/// caller waits for every chunk before it returns (and so before the closure goes).
#[derive(Clone, Copy)]
struct Job {
    columns: *const (dyn Fn(usize, usize) + Sync + 'static),
    n: usize,
    /// Threads the product is shared over (its [`Schedule`]'s).
    threads: usize,
}

struct Pool {
    /// Held while a product is shared out; a second caller computes alone.
    busy: Mutex<()>,
    /// The current product; written only under `busy`, while no chunk of it is claimed.
    job: UnsafeCell<Option<Job>>,
    /// The product's epoch (high 32 bits), its chunk count (16) and the next unclaimed chunk
    /// (16): a claim is one compare-exchange, and a late helper's stale epoch claims nothing.
    claim: AtomicU64,
    /// Chunks of the current product computed.
    finished: AtomicUsize,
    helpers: OnceLock<Vec<Helper>>,
    /// A `State`: set to `Stopped` (under `busy`) by `shutdown`.
    state: AtomicUsize,
    /// The helpers' handles, taken by `shutdown` to join them.
    handles: Mutex<Vec<JoinHandle<()>>>,
}

// `job` is published through `claim` (release/acquire) and read only by a thread holding an
// unfinished chunk of it, which the caller waits for before writing the next.
unsafe impl Sync for Pool {}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

/// Threads a product is split over, the caller included: `MLX_DISTRIBUTED_GEMM_THREADS`, or
/// every core. The products run on MLX's stream thread while the engine's thread builds the
/// next step's graph (the one-step-ahead decode). While a step took ~700 graph nodes, a helper
/// on the engine's core only stole its time (on 2 cores, packed decode 23.8 tok/s with a
/// helper, 32.5 without); with a packed dense layer's step as one node the engine thread idles
/// most of a step, and a helper pays (SmolLM2-135M 4-bit, 2 cores: 229.5 tok/s alone, 259.2
/// with one helper; the dequantized f32 mode 52.8 and 58.2).
fn threads() -> usize {
    std::env::var("MLX_DISTRIBUTED_GEMM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 16)
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| start(threads()))
}

/// A pool of `threads - 1` helpers (the caller is the other thread).
fn start(threads: usize) -> &'static Pool {
    let pool: &'static Pool = Box::leak(Box::new(Pool {
        busy: Mutex::new(()),
        job: UnsafeCell::new(None),
        claim: AtomicU64::new(0),
        finished: AtomicUsize::new(0),
        helpers: OnceLock::new(),
        state: AtomicUsize::new(State::Running as usize),
        handles: Mutex::new(Vec::new()),
    }));
    let mut handles = Vec::new();
    let mut helpers = Vec::new();
    for i in 1..threads {
        // Without a helper the caller computes every chunk itself.
        let Ok(t) = thread::Builder::new()
            .name(format!("skinny-gemm-{i}"))
            .spawn(move || helper_loop(pool, i))
        else {
            break;
        };
        helpers.push(Helper {
            thread: t.thread().clone(),
            sleeping: AtomicBool::new(false),
        });
        handles.push(t);
    }
    *pool.handles.lock().unwrap_or_else(|e| e.into_inner()) = handles;
    let _ = pool.helpers.set(helpers);
    pool
}

fn stopped(pool: &Pool) -> bool {
    pool.state.load(Acquire) == State::Stopped as usize
}

/// Stops the helper threads and joins them; later products run on the calling thread.
/// Waits for a product being shared out to finish first.
pub fn shutdown() {
    if let Some(pool) = POOL.get() {
        stop(pool);
    }
}

fn stop(pool: &Pool) {
    {
        let _busy = pool.busy.lock().unwrap_or_else(|e| e.into_inner());
        pool.state.store(State::Stopped as usize, SeqCst);
        // A new epoch with no chunks wakes every helper to see the state.
        let epoch = ((pool.claim.load(Relaxed) >> 32) + 1) & 0xffff_ffff;
        pool.claim.store(epoch << 32, SeqCst);
    }
    for h in pool.helpers.get().into_iter().flatten() {
        h.thread.unpark();
    }
    let handles = std::mem::take(&mut *pool.handles.lock().unwrap_or_else(|e| e.into_inner()));
    for t in handles {
        let _ = t.join();
    }
}

/// Weight rows of chunk `i` of a product of `n` split over `threads` ([`Schedule`]), in whole
/// tiles of 4.
fn chunk(n: usize, threads: usize, i: usize) -> (usize, usize) {
    let s = Schedule::of(n, threads);
    let tiles = |c: usize| (c * s.size).min(s.tiles) * 4;
    (tiles(i).min(n), tiles(i + 1).min(n))
}

/// Equal chunks, [`CHUNKS_PER_THREAD`] a thread (the last one shorter where they do not divide
/// the tiles).
#[derive(Clone, Copy)]
struct Schedule {
    tiles: usize,
    size: usize,
}

impl Schedule {
    fn of(n: usize, threads: usize) -> Schedule {
        let tiles = n.div_ceil(4);
        let size = (tiles / (CHUNKS_PER_THREAD * threads.max(1))).max(1);
        Schedule { tiles, size }
    }

    fn chunks(self) -> usize {
        self.tiles.div_ceil(self.size)
    }
}

/// Claims the next chunk of product `epoch`: its index and the chunk count, or None when every
/// chunk is taken or the product is no longer current.
fn claim_next(pool: &Pool, epoch: u64) -> Option<(usize, usize)> {
    let mut c = pool.claim.load(Acquire);
    loop {
        let (chunks, next) = ((c >> 16) & 0xffff, c & 0xffff);
        if c >> 32 != epoch || next >= chunks {
            return None;
        }
        match pool.claim.compare_exchange_weak(c, c + 1, AcqRel, Acquire) {
            Ok(_) => return Some((next as usize, chunks as usize)),
            Err(now) => c = now,
        }
    }
}

/// Computes chunks of product `epoch` until none is left unclaimed.
fn work(pool: &Pool, epoch: u64) {
    while let Some((i, chunks)) = claim_next(pool, epoch) {
        // Stable: the caller does not replace the job while this chunk is unfinished.
        if let Some(job) = unsafe { *pool.job.get() } {
            debug_assert!(i < chunks);
            let (n0, n1) = chunk(job.n, job.threads, i);
            // SAFETY: the caller's closure lives until every chunk is finished.
            unsafe { (*job.columns)(n0, n1) };
        }
        pool.finished.fetch_add(1, Release);
    }
}

/// Computes `g`, in chunks shared with the helpers when it is big enough and they are free.
pub fn run(g: &Gemm) {
    run_on(pool(), g);
}

fn run_on(pool: &Pool, g: &Gemm) {
    // SAFETY: `columns` reads `g`'s operands and writes columns n0..n1 of its output only.
    let work = |n0: usize, n1: usize| unsafe { columns(g, n0, n1) };
    share_on(pool, g.n, g.n * g.k, &work);
}

/// Runs `columns` over `0..n` in chunks of whole tiles of 4 columns, shared with the helpers
/// when `elements` (the weights it reads) is big enough and they are free; else on the
/// calling thread. Returns when every column is done.
pub fn share(n: usize, elements: usize, columns: Columns) {
    share_on(pool(), n, elements, columns);
}

fn share_on(pool: &Pool, n: usize, elements: usize, columns: Columns) {
    let helpers = pool.helpers.get().map_or(0, Vec::len);
    let guard = match helpers > 0 && elements >= PARALLEL_MIN {
        true => pool.busy.try_lock().ok().filter(|_| !stopped(pool)),
        false => None,
    };
    let Some(_guard) = guard else {
        columns(0, n);
        return;
    };
    let timed = crate::ab::Timed::start();
    let threads = helpers + 1;
    let chunks = Schedule::of(n, threads).chunks();
    debug_assert!(chunks <= 0xffff, "the claim word counts chunks in 16 bits");
    // SAFETY: only the lifetime is erased; this function waits for every chunk below.
    let erased: *const (dyn Fn(usize, usize) + Sync + 'static) =
        unsafe { std::mem::transmute(columns as *const (dyn Fn(usize, usize) + Sync + '_)) };
    unsafe {
        *pool.job.get() = Some(Job {
            columns: erased,
            n,
            threads,
        })
    };
    pool.finished.store(0, Relaxed);
    let epoch = ((pool.claim.load(Relaxed) >> 32) + 1) & 0xffff_ffff;
    pool.claim
        .store(epoch << 32 | (chunks as u64) << 16, SeqCst);
    for h in pool.helpers.get().into_iter().flatten() {
        if h.sleeping.load(SeqCst) {
            h.thread.unpark();
        }
    }
    work(pool, epoch);
    let mut spins = 0u32;
    while pool.finished.load(Acquire) < chunks {
        spins += 1;
        match spins < SPINS {
            true => std::hint::spin_loop(),
            false => thread::yield_now(),
        }
    }
    timed.finish(elements);
}

fn helper_loop(pool: &'static Pool, part: usize) {
    // Wait until the helper list (our own entry) is in place.
    let me = loop {
        if let Some(h) = pool.helpers.get() {
            break &h[part - 1];
        }
        thread::yield_now();
    };
    let epoch = || pool.claim.load(SeqCst) >> 32;
    let mut seen = 0;
    while !stopped(pool) {
        let mut spins = 0u32;
        while epoch() == seen && !stopped(pool) {
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
                continue;
            }
            me.sleeping.store(true, SeqCst);
            if epoch() == seen && !stopped(pool) {
                thread::park();
            }
            me.sleeping.store(false, SeqCst);
            spins = 0;
        }
        seen = epoch();
        work(pool, seen);
    }
}

#[cfg(test)]
mod tests {
    use super::{chunk, run, run_on, start, stop, Schedule};
    use crate::kernel::{columns, Gemm};

    /// `x W^T` for 8 rows of 96 against 1,000 weight rows: big enough to be shared out.
    fn product(a: &[f32], b: &[f32], c: &mut [f32]) -> Gemm {
        Gemm {
            m: 8,
            n: 1000,
            k: 96,
            alpha: 1.0,
            a: a.as_ptr(),
            lda: 96,
            b: b.as_ptr(),
            ldb: 96,
            b_trans: true,
            beta: 0.0,
            c: c.as_mut_ptr(),
            ldc: 1000,
        }
    }

    /// Inputs for `product` and its one-thread result; None without AVX2 and FMA.
    fn inputs(seed: usize) -> Option<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        if !is_x86_feature_detected!("avx2") || !is_x86_feature_detected!("fma") {
            return None;
        }
        let value = |i: usize, m: usize| (i % m) as f32 / m as f32 - 0.5;
        let a: Vec<f32> = (0..8 * 96).map(|i| value(i, 13 + seed)).collect();
        let b: Vec<f32> = (0..1000 * 96).map(|i| value(i, 29 + seed)).collect();
        let mut want = vec![0.0; 8 * 1000];
        unsafe { columns(&product(&a, &b, &mut want), 0, 1000) };
        Some((a, b, want))
    }

    #[test]
    fn shared_products_equal_one_thread_even_with_callers_racing() {
        let Some((a, b, want)) = inputs(0) else {
            return;
        };
        // Several callers at once: one shares out each product, the others compute alone.
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let mut got = vec![0.0; 8 * 1000];
                        run(&product(&a, &b, &mut got));
                        assert_eq!(got, want);
                    }
                });
            }
        });
    }

    #[test]
    fn products_after_shutdown_run_alone_and_stay_exact() {
        let Some((a, b, want)) = inputs(2) else {
            return;
        };
        // A pool of its own, so the process-wide one stays up for the other tests.
        let pool = start(3);
        let mut got = vec![0.0; 8 * 1000];
        run_on(pool, &product(&a, &b, &mut got));
        assert_eq!(got, want);
        stop(pool);
        stop(pool);
        let left = pool.handles.lock().unwrap_or_else(|e| e.into_inner()).len();
        assert_eq!(left, 0, "every helper was joined");
        let mut after = vec![0.0; 8 * 1000];
        run_on(pool, &product(&a, &b, &mut after));
        assert_eq!(after, want);
    }

    #[test]
    fn chunks_cover_every_row_once_in_whole_tiles() {
        for n in [1, 3, 4, 5, 17, 3072, 49152] {
            for threads in 1..9 {
                let chunks = Schedule::of(n, threads).chunks();
                let mut next = 0;
                for i in 0..chunks {
                    let (a, b) = chunk(n, threads, i);
                    assert_eq!(a, next);
                    assert!(a % 4 == 0 && a < b);
                    next = b;
                }
                assert_eq!(next, n);
                assert_eq!(
                    chunk(n, threads, chunks),
                    (n, n),
                    "past the last chunk: none"
                );
            }
        }
    }

    #[test]
    fn chunks_are_equal_two_a_thread() {
        // 3072 rows (768 tiles) over 2 threads: four quarters.
        let rows = |n, threads| {
            let chunks = Schedule::of(n, threads).chunks();
            (0..chunks)
                .map(|i| chunk(n, threads, i))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rows(3072, 2),
            [(0, 768), (768, 1536), (1536, 2304), (2304, 3072)]
        );
        // 1000 rows (250 tiles) over 3 threads: 41 tiles each, and the 4 left over.
        let last = rows(1000, 3);
        assert_eq!(last.len(), 7);
        assert_eq!((last[0], last[6]), ((0, 164), (984, 1000)));
    }
}
