//! Helpers shared by the integration tests: fixtures, free ports, time-bounded child processes.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The fixture cache that `scripts/fetch-test-model` fills (outside the git tree).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("MLX_DIST_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/mlx-distributed"),
    }
}

/// A fixture folder by name; a missing one is an error that says how to make it.
pub fn fixture(name: &str) -> TestResult<PathBuf> {
    let dir = cache_dir().join("fixtures").join(name);
    if !dir.is_dir() {
        return Err(format!(
            "fixture {} is missing: run scripts/fetch-test-model",
            dir.display()
        )
        .into());
    }
    Ok(dir)
}

/// A loopback port that was free a moment ago, below the kernel's ephemeral range. A port
/// from binding port 0 comes from that range, where every outgoing connection takes its local
/// port too, so a test's own gRPC client could take it before the rank it was meant for
/// listens. Ports go out in turn from a place that depends on the process, so two test
/// processes rarely try the same ones. No call hands out the port after another's: a rank's
/// control channel is its ring port + 1, and tests running at once take ports together.
pub fn free_port() -> TestResult<u16> {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = (10_000u32, ephemeral_start().max(10_002));
    // Even, so every port handed out has the parity of `low + start`, and none is another's + 1.
    let span = (high - low) & !1;
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span.min(4096) / 2 {
        let port = (low + (start.wrapping_add(NEXT.fetch_add(2, Relaxed)) % span)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The first port of the kernel's ephemeral range (Linux's default where it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Waits for a child, killing it when `limit` passes, so no test can hang. Its piped output
/// is read while it runs (a child that fills a pipe would otherwise block forever).
pub fn wait_bounded(mut child: Child, limit: Duration) -> TestResult<Output> {
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        stdout.join().map_err(|_| "reading stdout panicked")?,
        stderr.join().map_err(|_| "reading stderr panicked")?,
    );
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "child did not finish within {limit:?}; stderr:\n{}",
            String::from_utf8_lossy(&stderr)
        )
        .into()),
    }
}

/// Sends signal `name` (TERM, INT, KILL, STOP, ...) to a process.
pub fn signal(pid: u32, name: &str) -> TestResult {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill -{name} {pid} failed").into());
    }
    Ok(())
}

/// Waits for a child to exit, up to `limit`; its status and how long it took. A child still
/// running then is killed, and that is an error.
pub fn wait_exit(child: &mut Child, limit: Duration) -> TestResult<(ExitStatus, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, start.elapsed()));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("process {} did not exit within {limit:?}", child.id()).into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// GET `url`'s body, off the async runtime and bounded to 10 s.
pub async fn http_get(url: &str) -> TestResult<String> {
    let url = url.to_string();
    let body = tokio::task::spawn_blocking(move || {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(10))
            .build();
        let reply = agent.get(&url).call().map_err(|e| e.to_string())?;
        reply.into_string().map_err(|e| e.to_string())
    })
    .await??;
    Ok(body)
}

pub mod cluster;
pub mod goldens;
pub mod grammars;
pub mod mlx_lm;
pub mod netns;
pub mod prompts;
pub mod quality;
pub mod rpc;
pub mod server;
