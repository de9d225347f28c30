//! `worker bench-link` on two real ranks over MLX's ring on loopback: rank 0 prints a row of
//! all_sum and send/recv latency and bandwidth for every size, and a JSON line.

use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::cluster::{ring_ports, TempDir};
use integration_tests::server::workspace_binary;
use integration_tests::{wait_bounded, TestResult};

#[test]
fn two_ranks_measure_all_sum_and_send_recv_for_every_size() -> TestResult {
    let dir = TempDir::new("bench-link")?;
    let addrs: Vec<String> = ring_ports(2)?
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let hostfile = dir.0.join("hostfile.json");
    std::fs::write(&hostfile, serde_json::to_string(&addrs)?)?;
    let rank = |n: usize| -> TestResult<std::process::Child> {
        Ok(Command::new(workspace_binary("worker")?)
            .args(["bench-link", "--rank", &n.to_string(), "--hostfile"])
            .arg(&hostfile)
            .args(["--sizes-kb", "4,1024,65536", "--max-iters", "5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?)
    };
    let one = rank(1)?;
    let zero = rank(0)?;
    let out = wait_bounded(zero, Duration::from_secs(120))?;
    let worker = wait_bounded(one, Duration::from_secs(30))?;
    let stdout = String::from_utf8(out.stdout)?;
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        worker.status.success(),
        "{}",
        String::from_utf8_lossy(&worker.stderr)
    );
    for size in ["4 KB", "1 MB", "64 MB"] {
        assert!(stdout.contains(size), "no row for {size}:\n{stdout}");
    }
    let json = stdout.lines().last().ok_or("no output")?;
    let v: serde_json::Value = serde_json::from_str(json)?;
    let sizes = v["sizes"].as_array().ok_or("no sizes")?;
    assert_eq!(sizes.len(), 3);
    for s in sizes {
        assert!(s["all_sum"]["avg_gb_s"].as_f64() > Some(0.0), "{s}");
        assert!(s["send_recv"]["avg_ms"].as_f64() > Some(0.0), "{s}");
    }
    Ok(())
}
