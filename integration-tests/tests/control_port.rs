//! Hostile peers on rank 0's control port (issue #20): connections that never say a word must
//! not delay a worker's join, and `join_timeout` holds whatever they do. Rank 0 listens only
//! while LoadModel forms the cluster, so the idle connections are opened while it waits.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use integration_tests::cluster::Cluster;
use integration_tests::rpc::load_fixture;
use integration_tests::server::workspace_binary;
use integration_tests::TestResult;

const MODEL: &str = "smollm2-135m-4bit";

/// Idle connections per test: before the fix each held the join loop for 5 s.
const IDLE: usize = 8;

/// One cluster at a time: each runs several processes on a 2-core box.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Opens `n` connections to `addr` that never send a byte, retrying until rank 0 listens.
fn idle_connections(addr: &str, n: usize, limit: Duration) -> Result<Vec<TcpStream>, String> {
    let start = Instant::now();
    let mut open = Vec::new();
    while open.len() < n {
        match TcpStream::connect(addr) {
            Ok(s) => open.push(s),
            Err(e) if start.elapsed() > limit => {
                return Err(format!(
                    "rank 0 did not listen on {addr} within {limit:?}: {e}"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Ok(open)
}

/// The same, off the async runtime.
async fn open_idle(addr: String, n: usize) -> TestResult<Vec<TcpStream>> {
    let limit = Duration::from_secs(20);
    Ok(tokio::task::spawn_blocking(move || idle_connections(&addr, n, limit)).await??)
}

/// Starts the worker for rank 1 (as `Cluster::spawn_worker` does) with its log piped here: the child, and a channel that gets
/// the moment it logs "joined rank 0" (right after rank 0's `Accepted`).
fn spawn_watched_worker(cluster: &Cluster) -> TestResult<(Child, mpsc::Receiver<Instant>)> {
    let mut child = Command::new(workspace_binary("worker")?)
        .args(["mlx-distributed", "--rank", "1", "--hostfile"])
        .arg(&cluster.hostfile)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("MLX_DISTRIBUTED_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let (tx, joined) = mpsc::channel();
    let echo = std::env::var_os("CLUSTER_LOG").is_some();
    // Reads to EOF (the worker's end), so the pipe never fills and blocks the worker.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if echo {
                eprintln!("{line}");
            }
            if line.contains("joined rank 0") {
                let _ = tx.send(Instant::now());
            }
        }
    });
    Ok((child, joined))
}

#[tokio::test]
async fn idle_connections_do_not_delay_a_joining_worker() -> TestResult {
    let _serial = serial();
    tokio::time::timeout(Duration::from_secs(90), async {
        let mut cluster = Cluster::without_workers(2, "control-idle")?;
        let control = cluster.control_address()?;
        let rank0 = cluster.rank0(&[]).await?;
        let mut c = rank0.client().await?;
        let load = async {
            let reply = load_fixture(&mut c, MODEL, &["join_timeout:30"]).await;
            (reply, Instant::now())
        };
        let setup = async {
            let strangers = open_idle(control, IDLE).await?;
            // Time for rank 0 to take them all: each handshake now waits on its peer.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let spawned = Instant::now();
            let (worker, joined) = spawn_watched_worker(&cluster)?;
            Ok::<_, Box<dyn std::error::Error>>((strangers, worker, joined, spawned))
        };
        let ((reply, replied), setup) = tokio::join!(load, setup);
        let (_strangers, worker, joined, spawned) = setup?;
        cluster.workers.push(worker);
        let reply = reply?;
        let joined = joined
            .recv_timeout(Duration::from_secs(1))
            .map_err(|_| format!("the worker never logged its join: {reply:?}"))?;
        let join = joined.saturating_duration_since(spawned);
        let load = replied.saturating_duration_since(spawned);
        eprintln!(
            "behind {IDLE} idle connections: worker spawn to joined {join:?}, to LoadModel's \
             reply {load:?}"
        );
        assert!(reply.success, "{reply:?}");
        assert!(join < Duration::from_secs(2), "{join:?}");
        // The rest is MLX's ring setup (its connect retries were seen to add 1 or 2 s) and the load.
        assert!(load < Duration::from_secs(10), "{load:?}");
        Ok(())
    })
    .await
    .map_err(|_| "the test took over 90 s")?
}

#[tokio::test]
async fn join_timeout_holds_whatever_idle_connections_do() -> TestResult {
    let _serial = serial();
    tokio::time::timeout(Duration::from_secs(60), async {
        let cluster = Cluster::without_workers(2, "control-timeout")?;
        let control = cluster.control_address()?;
        let rank0 = cluster.rank0(&[]).await?;
        let mut c = rank0.client().await?;
        let asked = Instant::now();
        let (reply, strangers) = tokio::join!(
            load_fixture(&mut c, MODEL, &["join_timeout:5"]),
            open_idle(control, IDLE)
        );
        let took = asked.elapsed();
        let (reply, _strangers) = (reply?, strangers?);
        eprintln!(
            "LoadModel with join_timeout:5 and {IDLE} idle connections failed after {took:?}"
        );
        assert!(!reply.success, "{reply:?}");
        assert!(
            reply.message.contains("rank 1 (127.0.0.1:")
                && reply.message.contains("did not join within 5 s"),
            "{reply:?}"
        );
        assert!(
            took >= Duration::from_secs(4) && took <= Duration::from_secs(6),
            "{took:?}"
        );
        Ok(())
    })
    .await
    .map_err(|_| "the test took over 60 s")?
}
