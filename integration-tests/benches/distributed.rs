//! Distributed decode benchmark on loopback: 1 node, 2- and 3-rank pipeline, 3-rank tensor,
//! each a real cluster (rank 0 = the backend binary, workers = `worker mlx-distributed`).
//! Prints a table and a JSON line; ratios are against the single node measured in this run.
//! The per-step overhead (distributed minus single-node time per token) is what the
//! control plan, the activation hand-off and the extra synchronisation cost.

use std::time::Duration;

use backend::grpc::pb;
use integration_tests::cluster::Cluster;
use integration_tests::rpc::load_fixture;
use integration_tests::TestResult;

const MODEL: &str = "smollm2-135m-4bit";
const TOKENS: i32 = 128;
const RUNS: usize = 3;

/// Best decode tok/s over a few greedy runs of `TOKENS` tokens.
async fn decode_speed(
    c: &mut pb::backend_client::BackendClient<tonic::transport::Channel>,
) -> TestResult<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..RUNS {
        let req = pb::PredictOptions {
            prompt: "Write a story about the sea.".into(),
            tokens: TOKENS,
            ignore_eos: true,
            ..Default::default()
        };
        let r = c.predict(req).await?.into_inner();
        best = best.max(r.tokens as f64 / (r.timing_token_generation / 1000.0));
    }
    Ok(best)
}

async fn measure(ranks: usize, options: &[&str]) -> TestResult<f64> {
    let cluster = Cluster::start(ranks, &format!("bench{ranks}"))?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let loaded = load_fixture(&mut c, MODEL, options).await?;
    if !loaded.success {
        return Err(loaded.message.into());
    }
    decode_speed(&mut c).await
}

fn main() -> TestResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let run = async {
        let single = measure(1, &[]).await?;
        let modes: [(&str, usize, &[&str]); 3] = [
            ("pipeline-2", 2, &[]),
            ("pipeline-3", 3, &[]),
            ("tensor-3", 3, &["parallelism:tensor"]),
        ];
        println!(
            "{:<12} {:>9} {:>8} {:>16}",
            "mode", "tok/s", "ratio", "overhead ms/step"
        );
        println!("{:<12} {:>9.2} {:>8.2} {:>16}", "single", single, 1.0, "-");
        let mut json = serde_json::json!({"model": MODEL, "tokens": TOKENS, "single": single});
        for (name, ranks, options) in modes {
            let speed = measure(ranks, options).await?;
            let overhead = 1000.0 / speed - 1000.0 / single;
            println!(
                "{name:<12} {speed:>9.2} {:>8.2} {overhead:>16.2}",
                speed / single
            );
            json[name] = serde_json::json!({"tok_s": speed, "ratio": speed / single, "overhead_ms": overhead});
        }
        println!("{json}");
        TestResult::Ok(())
    };
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(1200), run).await })
        .map_err(|_| "the benchmark did not finish within 20 minutes")?
}
