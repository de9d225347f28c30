//! How LocalAI starts and stops a backend: `run.sh --addr`, and the parent watch.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backend::grpc::pb;
use integration_tests::cluster::TempDir;
use integration_tests::server::workspace_binary;
use integration_tests::{free_port, TestResult};
use tonic::transport::Channel;

async fn healthy(addr: &str, limit: Duration) -> TestResult {
    let start = Instant::now();
    loop {
        if let Ok(ch) = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            if let Ok(r) = pb::backend_client::BackendClient::new(ch)
                .health(pb::HealthMessage {})
                .await
            {
                assert_eq!(r.into_inner().message, b"OK");
                return Ok(());
            }
        }
        if start.elapsed() > limit {
            return Err(format!("no healthy backend at {addr} within {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn run_sh_starts_the_backend_as_localai_does() -> TestResult {
    let run_sh = concat!(env!("CARGO_MANIFEST_DIR"), "/../backend/run.sh");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut child = Command::new(run_sh)
        .args(["--addr", &addr])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../backend"))
        .env(
            "MLX_DISTRIBUTED_BACKEND_BIN",
            workspace_binary("mlx-distributed-backend")?,
        )
        .stderr(Stdio::null())
        .spawn()?;
    let result = healthy(&addr, Duration::from_secs(20)).await;
    child.kill()?;
    child.wait()?;
    result
}

/// LocalAI keeps a backend's stderr as its log: written to a file (no terminal), it is plain
/// text, without colour codes.
#[tokio::test]
async fn the_log_has_no_colour_codes_off_a_terminal() -> TestResult {
    let dir = TempDir::new("plain-log")?;
    let log_path = dir.0.join("backend.log");
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut child = Command::new(workspace_binary("mlx-distributed-backend")?)
        .args(["--addr", &addr])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()?;
    let result = healthy(&addr, Duration::from_secs(20)).await;
    child.kill()?;
    child.wait()?;
    result?;
    let log = std::fs::read_to_string(&log_path)?;
    assert!(log.contains("serving"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log:?}");
    Ok(())
}

/// The backend runs under a shell that is then killed: the backend must exit by itself.
#[tokio::test]
async fn backend_exits_when_its_parent_dies() -> TestResult {
    let addr = format!("127.0.0.1:{}", free_port()?);
    let bin = workspace_binary("mlx-distributed-backend")?;
    let mut parent = Command::new("sh")
        .args([
            "-c",
            &format!("\"{}\" --addr {addr} & echo $!; wait", bin.display()),
        ])
        .env("LOCALAI_BACKEND_PARENT_WATCH_INTERVAL", "200ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut pid = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(parent.stdout.take().ok_or("no stdout")?).read_line(&mut pid)?;
    let pid: u32 = pid.trim().parse()?;
    healthy(&addr, Duration::from_secs(20)).await?;
    parent.kill()?;
    parent.wait()?;
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && start.elapsed() < Duration::from_secs(10)
    {
        // A zombie still has a /proc entry; its state says it has exited.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.contains(") Z") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the backend outlived its parent by 10 s"
    );
    Ok(())
}
