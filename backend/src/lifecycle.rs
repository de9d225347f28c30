//! How a process that used MLX ends.
//!
//! MLX leaks its scheduler on purpose, so its stream threads keep running queued work while
//! `exit` destroys MLX's other statics (the stream list, the command encoders, the
//! allocator's buffer cache) and runs OpenBLAS's destructor, which joins OpenBLAS's threads.
//! Work still in flight at that moment frees into destroyed structures (glibc aborts with
//! "malloc_consolidate(): unaligned fastbin chunk detected") or waits for an OpenBLAS thread
//! that the destructor is joining (a hang). Work was in flight because a greedy decode queues
//! the next step before reading the current one, and nothing waited for the last one.
//!
//! So every binary ends in order: its own threads stop and are joined, every MLX stream
//! finishes what was queued on it (`quiesce`), and only then does `main` return. A stream
//! that cannot finish (blocked on a lost peer) makes the process `_exit` without running
//! destructors, with a non-zero code and a log line that says why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use mlx_rs::raw::try_status_op;

/// The exit code when MLX could not be quiesced (EX_TEMPFAIL: the host restarts us).
pub const EXIT_STUCK: i32 = 75;

/// How long `end_process` waits for MLX's streams.
const QUIESCE_LIMIT: Duration = Duration::from_secs(2);

/// Why a process could not end in order.
#[derive(Debug, thiserror::Error)]
pub enum ExitError {
    #[error("{what} did not finish within {limit:?} (blocked on a lost peer?)")]
    Stuck { what: &'static str, limit: Duration },
    #[error("waiting for MLX's streams failed: {0}")]
    Mlx(String),
}

/// Set once SIGTERM or SIGINT arrived.
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether the process was asked to stop (long waits check it).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Asks the process to stop, as SIGTERM does (the parent watch, tests).
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Turns SIGTERM and SIGINT into `stop_requested()`, for the long-running services (tools
/// keep the default: a signal ends them at once). A second signal ends the process now.
/// Idempotent.
pub fn watch_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static WATCHING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut watching = WATCHING.lock().unwrap_or_else(|e| e.into_inner());
    if *watching {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if stop_requested() {
                    tracing::error!(signal, "second stop signal; exiting now");
                    exit_now(128 + signal);
                }
                tracing::info!(signal, "stop signal received; shutting down");
                request_stop();
                start_stop_deadline();
            }
        })?;
    *watching = true;
    Ok(())
}

/// How long an orderly stop may take: a rank inside a long MLX step (a big prefill chunk)
/// cannot be interrupted, and the host and the other ranks must learn of the stop in seconds.
const STOP_LIMIT: Duration = Duration::from_millis(4500);

/// Ends the process `STOP_LIMIT` after a stop signal if it has not ended by itself, without
/// destructors (MLX is still busy). Not joined on purpose: it dies with the process.
fn start_stop_deadline() {
    let _ = std::thread::Builder::new()
        .name("stop-deadline".into())
        .spawn(|| {
            std::thread::sleep(STOP_LIMIT);
            tracing::error!(
                "still busy {STOP_LIMIT:?} after the stop signal (inside MLX?); exiting without cleanup"
            );
            exit_now(EXIT_STUCK);
        });
}

/// Resolves once the process was asked to stop.
pub async fn stopped() {
    while !stop_requested() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ends the process now, without destructors: for when MLX is stuck and they would race it.
pub fn exit_now(code: i32) -> ! {
    signal_hook::low_level::exit(code)
}

/// Waits up to `limit` for every MLX stream to run what was queued on it.
pub fn synchronize_streams(limit: Duration) -> Result<(), ExitError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("mlx-sync".into())
        .spawn(move || {
            let _ = tx.send(synchronize_all());
        })
        .map_err(|e| ExitError::Mlx(e.to_string()))?;
    rx.recv_timeout(limit).unwrap_or(Err(ExitError::Stuck {
        what: "MLX's queued work",
        limit,
    }))
}

/// `mlx_synchronize` on every stream MLX has made (each thread has its own default stream).
fn synchronize_all() -> Result<(), ExitError> {
    let mlx = |e: mlx_rs::error::Exception| ExitError::Mlx(e.to_string());
    // SAFETY: the vector and each stream handle are ours and freed exactly once.
    unsafe {
        let mut streams = mlx_sys::mlx_vector_stream_new();
        let outcome = try_status_op("get_streams", || mlx_sys::mlx_get_streams(&mut streams))
            .map_err(mlx)
            .and_then(|()| {
                for i in 0..mlx_sys::mlx_vector_stream_size(streams) {
                    let mut s = mlx_sys::mlx_stream_new();
                    let synced = try_status_op("get stream", || {
                        mlx_sys::mlx_vector_stream_get(&mut s, streams, i)
                    })
                    .and_then(|()| try_status_op("synchronize", || mlx_sys::mlx_synchronize(s)));
                    mlx_sys::mlx_stream_free(s);
                    synced.map_err(mlx)?;
                }
                Ok(())
            });
        mlx_sys::mlx_vector_stream_free(streams);
        outcome
    }
}

/// Leaves MLX and the BLAS idle for `exit`: every stream finished, the GEMM helpers joined.
pub fn quiesce(limit: Duration) -> Result<(), ExitError> {
    synchronize_streams(limit)?;
    skinny_gemm::shutdown();
    Ok(())
}

/// The last step of every `main`: quiesce, then return `code`; if MLX cannot be quiesced,
/// `_exit` with `EXIT_STUCK`, since `exit`'s destructors would race the stuck work.
pub fn end_process(code: u8) -> std::process::ExitCode {
    match quiesce(QUIESCE_LIMIT) {
        Ok(()) => std::process::ExitCode::from(code),
        Err(e) => {
            tracing::error!("{e}; exiting without cleanup");
            eprintln!("error: {e}; exiting without cleanup");
            exit_now(EXIT_STUCK)
        }
    }
}
