//! What grammars cost a decode step: 8 concurrent requests constrained by LocalAI's JSON-mode
//! grammar (and the same 8 free, sampled on the host with the same seed) on the 4-bit SmolLM2.
//! GetMetrics reports the host time the masks took (computing them while the device runs the
//! step, then masking the log-probabilities and feeding the matcher; not sampling) against those steps' wall time; the
//! target is at most 10% at 8 rows. Also reports aggregate tok/s with and without.

use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::grammars::JSON_OBJECT;
use integration_tests::rpc::load_fixture;
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use serde_json::Value;
use tonic::transport::Channel;

const MODEL: &str = "smollm2-135m-4bit";
const ROWS: usize = 8;
const TOKENS: i32 = 64;

fn request(i: usize, grammar: &str) -> pb::PredictOptions {
    pb::PredictOptions {
        use_tokenizer_template: true,
        messages: vec![pb::Message {
            role: "user".into(),
            content: format!("Describe city number {i} as a JSON object with many fields."),
            ..Default::default()
        }],
        tokens: TOKENS,
        temperature: 0.7,
        seed: i as i32,
        grammar: grammar.into(),
        ..Default::default()
    }
}

/// Aggregate tok/s of ROWS requests started together.
async fn round(c: &BackendClient<Channel>, grammar: &str) -> TestResult<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..ROWS)
        .map(|i| {
            let (mut c, req) = (c.clone(), request(i, grammar));
            tokio::spawn(async move { c.predict(req).await.map(|r| r.into_inner().tokens) })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += tokio::time::timeout(Duration::from_secs(600), t).await???;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn grammar_time(c: &mut BackendClient<Channel>) -> TestResult<Value> {
    let metrics = c.get_metrics(pb::MetricsRequest {}).await?.into_inner();
    let parsed: Value = serde_json::from_str(&metrics.prompt_json_for_slot)?;
    Ok(parsed["grammar"].clone())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let loaded = load_fixture(&mut c, MODEL, &[]).await?;
    assert!(loaded.success, "{loaded:?}");
    round(&c, "").await?; // warm-up, and llguidance's token trie
    round(&c, JSON_OBJECT).await?;
    let before = grammar_time(&mut c).await?;
    let free = round(&c, "").await?;
    let constrained = round(&c, JSON_OBJECT).await?;
    let after = grammar_time(&mut c).await?;
    let delta = |k: &str| after[k].as_f64().unwrap_or(0.0) - before[k].as_f64().unwrap_or(0.0);
    let (steps, mask, step) = (delta("steps"), delta("mask_secs"), delta("step_secs"));
    println!(
        "{ROWS} rows, {TOKENS} tokens each: {steps} constrained steps, mask {:.2} ms and step \
         {:.2} ms a step: masks {:.1}% of the step (target <= 10%); {constrained:.1} tok/s \
         constrained, {free:.1} tok/s free ({:.2}x)",
        1e3 * mask / steps,
        1e3 * step / steps,
        100.0 * mask / step,
        constrained / free
    );
    Ok(())
}
