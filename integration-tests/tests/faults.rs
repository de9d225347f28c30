//! Faults on a real 2-rank cluster: the worker is killed (SIGKILL or SIGTERM) while idle,
//! during a prefill and during decoding, or stopped (SIGSTOP: a rank that hangs with its
//! sockets open, as behind a blocked port). Each time rank 0 reports the failure within 10 s,
//! and after the worker is restarted it serves again. Every wait is bounded.

use std::process::Child;
use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::rpc::{load_fixture, stream_error};
use integration_tests::TestResult;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

const MODEL: &str = "smollm2-135m-4bit";
const REPORTED_WITHIN: Duration = Duration::from_secs(10);

/// One cluster at a time: each runs several processes on a 2-core box.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle,
    Prefill,
    Decode,
}

fn signal(child: &Child, name: &str) -> TestResult {
    integration_tests::signal(child.id(), name)
}

fn long_request(prompt: String, tokens: i32) -> pb::PredictOptions {
    pb::PredictOptions {
        prompt,
        tokens,
        ignore_eos: true,
        ..Default::default()
    }
}

/// Waits until Health says DEGRADED naming rank 1.
async fn degraded(c: &mut BackendClient<Channel>) -> TestResult {
    let start = Instant::now();
    while start.elapsed() < REPORTED_WITHIN {
        let health = c.health(pb::HealthMessage {}).await?.into_inner();
        if String::from_utf8(health.message)?.starts_with("DEGRADED: rank 1") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("Health did not report the lost rank within 10 s".into())
}

/// A request in flight when the fault hits ends in UNAVAILABLE naming rank 1 within 10 s.
async fn fails_with_rank_lost(
    stream: &mut tonic::Streaming<pb::Reply>,
    since: Instant,
) -> TestResult {
    let status = stream_error(stream, REPORTED_WITHIN).await?;
    assert!(since.elapsed() < REPORTED_WITHIN);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("rank 1"), "{status:?}");
    Ok(())
}

/// Hits the worker with `sig` in `phase`, checks the report, restarts it and serves again.
async fn fault_and_recover(
    cluster: &mut Cluster,
    c: &mut BackendClient<Channel>,
    sig: &str,
    phase: Phase,
) -> TestResult {
    let request = match phase {
        Phase::Idle => None,
        // About 1,500 prompt tokens: several seconds of prefill on this box.
        Phase::Prefill => Some(long_request("The sea. ".repeat(500), 4)),
        Phase::Decode => Some(long_request("Write a long story.".into(), 4000)),
    };
    let mut stream = match request {
        Some(req) => Some(c.clone().predict_stream(req).await?.into_inner()),
        None => None,
    };
    match (phase, stream.as_mut()) {
        (Phase::Decode, Some(s)) => drop(s.next().await.ok_or("no first token")??),
        (Phase::Prefill, _) => tokio::time::sleep(Duration::from_millis(700)).await,
        _ => {}
    }
    let worker = cluster.workers.remove(0);
    let hit = Instant::now();
    signal(&worker, sig)?;
    if let Some(s) = stream.as_mut() {
        fails_with_rank_lost(s, hit).await?;
    }
    degraded(c).await?;
    let err = c.predict(long_request("Hi".into(), 2)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{sig} {phase:?}: {err:?}");
    reap(worker, sig)?;
    cluster.workers.push(cluster.spawn_worker(1, &[])?);
    let loaded = load_fixture(c, MODEL, &[]).await?;
    assert!(loaded.success, "{sig} {phase:?}: {loaded:?}");
    let reply = c
        .predict(long_request("Hello".into(), 4))
        .await?
        .into_inner();
    assert_eq!(reply.tokens, 4, "{sig} {phase:?}");
    Ok(())
}

/// Ends a signalled worker for good (a stopped one is killed). SIGTERM is an orderly stop:
/// the worker leaves between steps and exits 0.
fn reap(mut worker: Child, sig: &str) -> TestResult {
    if sig == "STOP" {
        worker.kill()?;
    }
    let (status, took) = integration_tests::wait_exit(&mut worker, Duration::from_secs(10))?;
    if sig == "TERM" {
        assert!(
            status.success(),
            "TERM: the worker ended with {status} after {took:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn killed_workers_are_reported_within_seconds_in_every_phase_and_recover() -> TestResult {
    let _serial = serial();
    let mut cluster = Cluster::start(2, "faults")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    for (sig, phase) in [
        ("KILL", Phase::Idle),
        ("TERM", Phase::Prefill),
        ("KILL", Phase::Prefill),
        ("TERM", Phase::Decode),
        ("TERM", Phase::Idle),
    ] {
        tokio::time::timeout(
            Duration::from_secs(120),
            fault_and_recover(&mut cluster, &mut c, sig, phase),
        )
        .await
        .map_err(|_| format!("{sig} {phase:?} took over 120 s"))?
        .map_err(|e| format!("{sig} {phase:?}: {e}"))?;
    }
    Ok(())
}

#[tokio::test]
async fn a_hung_worker_is_reported_within_seconds_and_the_cluster_recovers() -> TestResult {
    let _serial = serial();
    let mut cluster = Cluster::start(2, "hung")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    // Idle: the heartbeat notices within three missed pings. Rank 0 is not blocked in MLX,
    // so it stays up and LoadModel forms the cluster again with a fresh worker.
    fault_and_recover(&mut cluster, &mut c, "STOP", Phase::Idle).await
}
