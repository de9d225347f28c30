//! Processes end cleanly, every time. Exiting with MLX work still queued once corrupted the
//! heap (glibc aborted in `malloc_consolidate` after the answer was printed) or hung in
//! OpenBLAS's destructor; see `backend::lifecycle`. Here real processes on the real model
//! exit with status 0 within their bounds, many times over, with skinny-gemm on and off and
//! with glibc's free-memory poisoning on for half of the runs (a use after free then reads
//! garbage instead of stale data).

use std::process::{Command, Stdio};
use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::goldens::{self, GoldenCase};
use integration_tests::rpc::{golden_request, load_fixture, stream_error};
use integration_tests::server::{workspace_binary, BackendProcess};
use integration_tests::{fixture, wait_exit, TestResult};

type Client = BackendClient<tonic::transport::Channel>;

const MODEL: &str = "smollm2-135m-4bit";
/// Our default CPU mode on the 4-bit fixture equals mlx-lm on its f32 dequantization.
const GOLDENS: &str = "smollm2-135m-4bit-f32";
const TOKENS: usize = 4;
/// A stopped server or rank must be gone within this.
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// One process tree at a time: the box has two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Signals the backend and waits for its exit on a blocking thread, so that this test's
/// client runtime keeps answering the server's graceful close, as a real client does.
async fn stop(
    mut backend: BackendProcess,
    sig: &'static str,
) -> TestResult<(std::process::ExitStatus, Duration)> {
    let stopped = tokio::task::spawn_blocking(move || {
        backend.stop(sig, EXIT_WITHIN).map_err(|e| e.to_string())
    });
    Ok(stopped.await??)
}

/// Run `i`'s environment: skinny-gemm on or off, free-memory poisoning on or off.
fn variant(i: usize) -> [(&'static str, &'static str); 2] {
    [
        ("MLX_DISTRIBUTED_SKINNY_GEMM", ["1", "0"][i % 2]),
        ("MALLOC_PERTURB_", ["0", "165"][(i / 2) % 2]),
    ]
}

/// `worker generate` for one golden case; its greedy ids must be the golden's first ones.
fn generate_once(case: &GoldenCase, i: usize) -> TestResult {
    let mut cmd = Command::new(workspace_binary("worker")?);
    cmd.args([
        "generate",
        "--temperature",
        "0",
        "--print-ids",
        "--max-tokens",
    ])
    .arg(TOKENS.to_string())
    .arg("--model")
    .arg(fixture(MODEL)?)
    .args(["--prompt", &case.prompt])
    .envs(variant(i))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if case.chat {
        cmd.arg("--chat");
    }
    let out = integration_tests::wait_bounded(cmd.spawn()?, Duration::from_secs(60))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "run {i} ({}, {:?}) exited with {}; stderr:\n{stderr}",
        case.name,
        variant(i),
        out.status
    );
    let want = format!("ids={:?}", &case.tokens[..TOKENS]);
    assert!(
        stderr.contains(&want),
        "run {i}: want {want}; stderr:\n{stderr}"
    );
    Ok(())
}

/// LoadModel of the fixture, then a greedy Predict of a few tokens of `case`.
async fn load_and_predict(c: &mut Client, case: &GoldenCase, i: usize) -> TestResult {
    let loaded = load_fixture(c, MODEL, &[]).await?;
    assert!(loaded.success, "cycle {i}: {loaded:?}");
    let reply = c.predict(golden_request(case, TOKENS)).await?.into_inner();
    assert_eq!(reply.tokens as usize, TOKENS, "cycle {i}");
    Ok(())
}

#[test]
fn hundred_generate_processes_exit_zero() -> TestResult {
    let _serial = serial();
    let g = goldens::load(GOLDENS)?;
    for i in 0..100 {
        generate_once(&g.cases[i % g.cases.len()], i)?;
    }
    Ok(())
}

/// Start, LoadModel, Predict, then SIGTERM or SIGINT; the backend is gone, with status 0,
/// within `EXIT_WITHIN`. Every third cycle stops it in the middle of a stream instead,
/// which must end with UNAVAILABLE.
#[tokio::test]
async fn backend_start_load_predict_stop_cycles_exit_zero() -> TestResult {
    let _serial = serial();
    let g = goldens::load(GOLDENS)?;
    for i in 0..20 {
        let backend = BackendProcess::start(&variant(i)).await?;
        let mut c = backend.client().await?;
        let case = &g.cases[i % g.cases.len()];
        load_and_predict(&mut c, case, i).await?;
        let sig = ["TERM", "INT"][i % 2];
        if i % 3 == 2 {
            let long = pb::PredictOptions {
                tokens: 2000,
                ignore_eos: true,
                ..golden_request(case, 0)
            };
            let mut stream = c.predict_stream(long).await?.into_inner();
            stream.message().await?;
            let (ended, stopped) =
                tokio::join!(stream_error(&mut stream, EXIT_WITHIN), stop(backend, sig));
            let (ended, (status, took)) = (ended?, stopped?);
            assert_eq!(
                ended.code(),
                tonic::Code::Unavailable,
                "cycle {i}: {ended:?}"
            );
            assert!(
                status.success(),
                "cycle {i}: SIG{sig} mid-stream: {status} after {took:?}"
            );
            eprintln!("cycle {i}: SIG{sig} mid-stream: exited 0 in {took:?}");
        } else {
            let (status, took) = stop(backend, sig).await?;
            assert!(
                status.success(),
                "cycle {i}: SIG{sig}: {status} after {took:?}"
            );
            eprintln!("cycle {i}: SIG{sig}: exited 0 in {took:?}");
        }
    }
    Ok(())
}

/// A 2-rank pipeline: start, LoadModel, Predict, then SIGTERM to rank 0 and the worker;
/// both exit 0 within `EXIT_WITHIN`.
#[tokio::test]
async fn two_rank_cluster_cycles_exit_zero() -> TestResult {
    let _serial = serial();
    let g = goldens::load(GOLDENS)?;
    for i in 0..10 {
        let mut cluster = Cluster::start(2, &format!("exit{i}"))?;
        let rank0 = cluster.rank0(&[]).await?;
        let mut c = rank0.client().await?;
        load_and_predict(&mut c, &g.cases[i % g.cases.len()], i).await?;
        let (status, took) = stop(rank0, "TERM").await?;
        assert!(
            status.success(),
            "cycle {i}: rank 0: {status} after {took:?}"
        );
        let mut worker = cluster.workers.remove(0);
        integration_tests::signal(worker.id(), "TERM")?;
        let (status, worker_took) = wait_exit(&mut worker, EXIT_WITHIN)?;
        assert!(
            status.success(),
            "cycle {i}: rank 1: {status} after {worker_took:?}"
        );
        eprintln!("cycle {i}: rank 0 exited 0 in {took:?}, rank 1 in {worker_took:?}");
    }
    Ok(())
}

/// Rank 0 waiting on a worker that hangs (SIGSTOP, sockets open) mid-stream still stops in
/// order: the wait gives up on the stop, the stream ends UNAVAILABLE, and rank 0 exits 0
/// within `EXIT_WITHIN`.
#[tokio::test]
async fn rank0_waiting_on_a_hung_worker_still_exits_zero() -> TestResult {
    let _serial = serial();
    let g = goldens::load(GOLDENS)?;
    let cluster = Cluster::start(2, "exit-hung")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    load_and_predict(&mut c, &g.cases[0], 0).await?;
    let long = pb::PredictOptions {
        tokens: 4000,
        ignore_eos: true,
        ..golden_request(&g.cases[0], 0)
    };
    let mut stream = c.predict_stream(long).await?.into_inner();
    stream.message().await?;
    integration_tests::signal(cluster.workers[0].id(), "STOP")?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ended, stopped) =
        tokio::join!(stream_error(&mut stream, EXIT_WITHIN), stop(rank0, "TERM"));
    let (ended, (status, took)) = (ended?, stopped?);
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    assert!(status.success(), "rank 0: {status} after {took:?}");
    eprintln!("rank 0 with a hung worker: exited 0 in {took:?}");
    Ok(())
}
