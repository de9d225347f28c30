//! `worker check` against a real worker on loopback: every finding is ✓ when the worker runs
//! this build and has the model, the worker still serves rank 0 afterwards, and missing
//! pieces are ✗ lines with a fix and a failing exit code, within the join timeout.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use integration_tests::cluster::{Cluster, TempDir};
use integration_tests::rpc::load_fixture;
use integration_tests::server::workspace_binary;
use integration_tests::{fixture, wait_bounded, TestResult};

const MODEL: &str = "smollm2-135m-4bit";

fn check(hostfile: &std::path::Path, extra: &[&str]) -> TestResult<(Output, String)> {
    let child = Command::new(workspace_binary("worker")?)
        .arg("check")
        .arg("--hostfile")
        .arg(hostfile)
        .args(["--join-timeout", "5"])
        .args(extra)
        .env_remove("MLX_DISTRIBUTED_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = wait_bounded(child, Duration::from_secs(60))?;
    let text = String::from_utf8(out.stdout.clone())?;
    Ok((out, text))
}

#[tokio::test]
async fn a_healthy_cluster_passes_and_the_worker_serves_afterwards() -> TestResult {
    let cluster = Cluster::start(2, "preflight")?;
    let model = fixture(MODEL)?.display().to_string();
    let (out, text) = check(&cluster.hostfile, &["--model", &model])?;
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains('✗'), "{text}");
    for needle in [
        "2 ranks over ring",
        "this machine is rank [0, 1]",
        "ranks 1..1 joined",
        "rank 1: has",
        "rank 1: ",
    ] {
        assert!(text.contains(needle), "no `{needle}` in:\n{text}");
    }
    let (out, text) = check(&cluster.hostfile, &["--model", "/no/such/model"])?;
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("✗ rank 1:") && text.contains("fix:"),
        "{text}"
    );
    // The worker went back to waiting for rank 0, and serves it.
    let rank0 = cluster.rank0(&[]).await?;
    let loaded = load_fixture(&mut rank0.client().await?, MODEL, &[]).await?;
    assert!(loaded.success, "{loaded:?}");
    Ok(())
}

#[test]
fn a_missing_worker_is_a_failed_finding_with_a_fix() -> TestResult {
    let dir = TempDir::new("preflight-alone")?;
    let hostfile = dir.0.join("two.json");
    let port = integration_tests::cluster::ring_ports(2)?;
    let addrs = [
        format!("127.0.0.1:{}", port[0]),
        format!("127.0.0.1:{}", port[1]),
    ];
    std::fs::write(&hostfile, serde_json::to_string(&addrs)?)?;
    let (out, text) = check(&hostfile, &[])?;
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("✗ ") && text.contains("rank 1 (127.0.0.1"),
        "{text}"
    );
    assert!(text.contains("did not join within 5 s"), "{text}");
    assert!(text.contains("worker mlx-distributed --rank N"), "{text}");
    Ok(())
}
