//! `worker check` against a real worker on loopback: every finding is ✓ when the worker runs
//! this build and has the model, the worker still serves rank 0 afterwards, and missing
//! pieces are ✗ lines with a fix and a failing exit code, within the join timeout. One model
//! YAML (`--config`) starts a worker and drives the check.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use integration_tests::cluster::{Cluster, TempDir};
use integration_tests::rpc::load_fixture;
use integration_tests::server::workspace_binary;
use integration_tests::{fixture, wait_bounded, TestResult};

const MODEL: &str = "smollm2-135m-4bit";

fn check(hostfile: &std::path::Path, extra: &[&str]) -> TestResult<(Output, String)> {
    let hostfile = hostfile.to_str().ok_or("a UTF-8 path")?;
    check_with(&[&["--hostfile", hostfile], extra].concat())
}

/// `worker check` with these arguments alone (no hostfile from the environment either).
fn check_with(args: &[&str]) -> TestResult<(Output, String)> {
    let child = Command::new(workspace_binary("worker")?)
        .arg("check")
        .args(args)
        .args(["--join-timeout", "5"])
        .env_remove("MLX_DISTRIBUTED_HOSTFILE")
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

/// A model YAML as a LocalAI user writes it, naming the cluster in its options.
fn model_yaml(model: &str, options: &[String]) -> String {
    let options: String = options.iter().map(|o| format!("  - \"{o}\"\n")).collect();
    format!(
        "name: smol\nbackend: mlx-distributed\nparameters:\n  model: {model}\n  \
         temperature: 0.7\ncontext_size: 2048\noptions:\n{options}"
    )
}

/// `worker mlx-distributed --rank N --config Y`, and nothing else to say where the cluster is.
fn worker_with_config(
    rank: usize,
    yaml: &std::path::Path,
    stderr: Stdio,
) -> TestResult<std::process::Child> {
    Ok(Command::new(workspace_binary("worker")?)
        .args(["mlx-distributed", "--rank", &rank.to_string(), "--config"])
        .arg(yaml)
        .env_remove("MLX_DISTRIBUTED_HOSTFILE")
        .env_remove("MLX_DISTRIBUTED_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()?)
}

/// One model YAML, the same file, starts the worker and drives the check: its options name
/// the hostfile and the transport, its `parameters.model` the model every rank must have. A
/// YAML LoadModel would refuse is refused by both, naming the option.
#[test]
fn one_model_yaml_starts_the_worker_and_drives_the_check() -> TestResult {
    let mut cluster = Cluster::without_workers(2, "preflight-yaml")?;
    let hostfile = cluster.hostfile.display().to_string();
    let model = fixture(MODEL)?.display().to_string();
    let yaml = cluster.hostfile.with_file_name("model.yaml");
    let options = [
        format!("hostfile:{hostfile}"),
        "distributed_backend:ring".into(),
    ];
    std::fs::write(&yaml, model_yaml(&model, &options))?;
    cluster
        .workers
        .push(worker_with_config(1, &yaml, Stdio::inherit())?);
    let yaml_arg = yaml.to_str().ok_or("a UTF-8 path")?;
    let (out, text) = check_with(&["--config", yaml_arg])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{stderr}");
    for needle in ["2 ranks over ring", "ranks 1..1 joined", "rank 1: has"] {
        assert!(text.contains(needle), "no `{needle}` in:\n{text}");
    }
    let bad = yaml.with_file_name("bad.yaml");
    let options = [
        format!("hostfile:{hostfile}"),
        "distributed_backend:mpi".into(),
    ];
    std::fs::write(&bad, model_yaml(&model, &options))?;
    let (out, _) = check_with(&["--config", bad.to_str().ok_or("a UTF-8 path")?])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("distributed_backend"),
        "{stderr}"
    );
    let out = wait_bounded(
        worker_with_config(1, &bad, Stdio::piped())?,
        Duration::from_secs(30),
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("distributed_backend"),
        "{stderr}"
    );
    Ok(())
}
