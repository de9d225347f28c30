//! Soak on a real 2-rank pipeline: 500 sequential and then 50 concurrent requests, each with
//! its own prompt (so the prefix cache keeps evicting), bounded in time. No request is lost,
//! and after warm-up the resident memory of both ranks grows by less than 10%.

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::rpc::load_fixture;
use integration_tests::TestResult;
use tonic::transport::Channel;

const MODEL: &str = "smollm2-135m-4bit";
const WARM_UP: usize = 50;
const SEQUENTIAL: usize = 500;
const CONCURRENT: usize = 50;

/// Resident bytes of a process, from /proc.
fn rss(pid: u32) -> TestResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmRSS")?;
    Ok(kb << 10)
}

async fn ask(c: &mut BackendClient<Channel>, i: usize, tokens: i32) -> TestResult<i32> {
    let req = pb::PredictOptions {
        prompt: format!("Request {i}: name a colour and a number like {}.", i * 7),
        tokens,
        ignore_eos: true,
        ..Default::default()
    };
    Ok(c.predict(req).await?.into_inner().tokens)
}

/// `n` requests at once (first id `from`); every one must be answered in full.
async fn burst(c: &BackendClient<Channel>, from: usize, n: usize) -> TestResult {
    let mut tasks = Vec::new();
    for i in from..from + n {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            ask(&mut c, i, 8).await.map_err(|e| e.to_string())
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await??, 8, "concurrent request {i}");
    }
    Ok(())
}

async fn soak(c: &mut BackendClient<Channel>, pids: [u32; 2]) -> TestResult {
    // Warm-up: the prefix cache fills and MLX's buffer cache sees a full batch.
    for i in 0..WARM_UP {
        assert_eq!(ask(c, i, 2).await?, 2, "warm-up request {i}");
    }
    burst(c, WARM_UP, 16).await?;
    let before = [rss(pids[0])?, rss(pids[1])?];
    for i in 0..SEQUENTIAL {
        assert_eq!(ask(c, 1000 + i, 2).await?, 2, "request {i}");
    }
    burst(c, 2000, CONCURRENT).await?;
    for (rank, (pid, was)) in pids.iter().zip(before).enumerate() {
        let now = rss(*pid)?;
        assert!(
            (now as f64) < was as f64 * 1.10,
            "rank {rank}: resident memory grew from {} to {} MB",
            was >> 20,
            now >> 20
        );
    }
    Ok(())
}

#[tokio::test]
async fn five_hundred_sequential_and_fifty_concurrent_requests_on_two_ranks() -> TestResult {
    let cluster = Cluster::start(2, "soak")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let pids = [rank0.pid(), cluster.workers[0].id()];
    tokio::time::timeout(Duration::from_secs(900), soak(&mut c, pids))
        .await
        .map_err(|_| "the soak did not finish within 15 minutes")?
}
