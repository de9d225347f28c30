//! Continuous batching throughput: aggregate decode tok/s of 1, 4 and 8 concurrent greedy
//! streams, on one node and on a 2-rank pipeline on loopback. Each stream decodes `TOKENS`
//! tokens (eos ignored); the aggregate is all tokens over the wall time of the slowest stream.

use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::rpc::load_fixture;
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use tonic::transport::Channel;

const MODEL: &str = "smollm2-135m-4bit";
const TOKENS: i32 = 64;
const PROMPTS: [&str; 8] = [
    "Write a story about the sea.",
    "What is the capital of France?",
    "List three prime numbers.",
    "Explain gravity to a child.",
    "Translate 'good morning' into Spanish.",
    "Write a haiku about autumn.",
    "Why is the sky blue?",
    "Describe a cat in one sentence.",
];

/// Aggregate tok/s of `n` streams started together.
async fn aggregate(c: &BackendClient<Channel>, n: usize) -> TestResult<f64> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for prompt in PROMPTS.iter().cycle().take(n) {
        let mut c = c.clone();
        let req = pb::PredictOptions {
            prompt: prompt.to_string(),
            tokens: TOKENS,
            ignore_eos: true,
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            c.predict(req).await.map(|r| r.into_inner().tokens)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn rows(name: &str, c: &BackendClient<Channel>) -> TestResult<serde_json::Value> {
    aggregate(c, 1).await?; // warm-up
    let mut out = serde_json::json!({});
    let one = aggregate(c, 1).await?;
    for n in [1, 4, 8] {
        let speed = if n == 1 { one } else { aggregate(c, n).await? };
        println!("{name:<12} {n:>7} {speed:>10.2} {:>8.2}", speed / one);
        out[n.to_string()] = serde_json::json!(speed);
    }
    Ok(out)
}

fn main() -> TestResult {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let run = async {
        println!(
            "{:<12} {:>7} {:>10} {:>8}",
            "setup", "streams", "tok/s", "x 1"
        );
        let server = BackendProcess::start(&[]).await?;
        let c = server.client().await?;
        let loaded = load_fixture(&mut c.clone(), MODEL, &[]).await?;
        if !loaded.success {
            return Err(loaded.message.into());
        }
        let single = rows("single", &c).await?;
        drop(server);
        let cluster = Cluster::start(2, "batch-bench")?;
        let rank0 = cluster.rank0(&[]).await?;
        let c = rank0.client().await?;
        let loaded = load_fixture(&mut c.clone(), MODEL, &[]).await?;
        if !loaded.success {
            return Err(loaded.message.into());
        }
        let pipeline = rows("pipeline-2", &c).await?;
        println!(
            "{}",
            serde_json::json!({"model": MODEL, "tokens": TOKENS, "single": single, "pipeline-2": pipeline})
        );
        TestResult::Ok(())
    };
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(900), run).await })
        .map_err(|_| "the benchmark did not finish within 15 minutes")?
}
