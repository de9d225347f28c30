//! Continuous batching over real gRPC: concurrent greedy streams share decode steps and each
//! still equals its single-request golden; a full queue gets RESOURCE_EXHAUSTED and the
//! server keeps serving.

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::goldens;
use integration_tests::rpc::{golden_request, load_fixture, stream_text};
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use tonic::transport::Channel;
use tonic::Code;

/// Our default CPU mode on the 4-bit fixture equals mlx-lm on its f32 dequantization.
const GOLDENS: &str = "smollm2-135m-4bit-f32";
const MODEL: &str = "smollm2-135m-4bit";

/// One cluster or server at a time: each runs several processes on a 2-core box.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` greedy streams at once (the golden cases in turn, with different prompt lengths and
/// finishes); each must equal its golden text exactly.
async fn concurrent_streams_equal_goldens(c: &BackendClient<Channel>, n: usize) -> TestResult {
    let g = goldens::load(GOLDENS)?;
    let mut tasks = Vec::new();
    for case in g.cases.iter().take(n) {
        let (mut c, req) = (c.clone(), golden_request(case, g.max_tokens));
        tasks.push(tokio::spawn(async move {
            stream_text(&mut c, req).await.map_err(|e| e.to_string())
        }));
    }
    for (case, task) in g.cases.iter().zip(tasks) {
        let (text, last) = task.await??;
        assert_eq!(text, case.text, "case {} in a batch of {n}", case.name);
        assert_eq!(
            last.tokens as usize,
            case.tokens.len(),
            "case {}",
            case.name
        );
    }
    Ok(())
}

/// Loads the fixture with `options`, then runs 8 concurrent streams against the goldens,
/// bounded in time.
async fn load_then_eight_streams(c: BackendClient<Channel>, options: &[&str]) -> TestResult {
    let loaded = load_fixture(&mut c.clone(), MODEL, options).await?;
    assert!(loaded.success, "{loaded:?}");
    tokio::time::timeout(
        Duration::from_secs(300),
        concurrent_streams_equal_goldens(&c, 8),
    )
    .await?
}

#[tokio::test]
async fn eight_concurrent_streams_equal_their_goldens_on_one_node() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    load_then_eight_streams(server.client().await?, &[]).await
}

/// Weights dequantized to f32 at load (the default keeps them packed): decode rows batched
/// together through skinny-gemm equal each row alone.
#[tokio::test]
async fn eight_concurrent_streams_equal_their_goldens_with_dequantized_weights() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    load_then_eight_streams(server.client().await?, &["dequantize:true"]).await
}

#[tokio::test]
async fn eight_concurrent_streams_equal_their_goldens_on_two_rank_pipeline() -> TestResult {
    let _serial = serial();
    let cluster = Cluster::start(2, "batch-pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    load_then_eight_streams(rank0.client().await?, &[]).await
}

#[tokio::test]
async fn a_full_queue_gets_resource_exhausted_and_the_server_keeps_serving() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let c = server.client().await?;
    let loaded = load_fixture(&mut c.clone(), MODEL, &["max_batch:1", "max_queue:1"]).await?;
    assert!(loaded.success, "{loaded:?}");
    let long = pb::PredictOptions {
        prompt: "Tell me a long story.".into(),
        tokens: 48,
        ignore_eos: true,
        ..Default::default()
    };
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (mut c, req) = (c.clone(), long.clone());
        tasks.push(tokio::spawn(async move {
            c.predict(req).await.map(|r| r.into_inner().tokens)
        }));
    }
    let (mut served, mut refused) = (0, 0);
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(120), task).await?? {
            Ok(tokens) => {
                assert_eq!(tokens, 48);
                served += 1;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(status.message().contains("max_queue"), "{status:?}");
                refused += 1;
            }
        }
    }
    assert!(
        served >= 2,
        "one running and one queued are served ({served})"
    );
    assert!(refused >= 1, "the rest are refused ({refused})");
    let again = c.clone().predict(long).await?.into_inner();
    assert_eq!(again.tokens, 48);
    Ok(())
}

#[tokio::test]
async fn the_kv_budget_queues_what_does_not_fit_and_refuses_what_never_can() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let c = server.client().await?;
    // A row of 256 positions takes 11.25 MiB here, so 20 MiB holds one row at a time.
    let loaded = load_fixture(&mut c.clone(), MODEL, &["kv_memory_mb:20"]).await?;
    assert!(loaded.success, "{loaded:?}");
    let short = pb::PredictOptions {
        prompt: "Tell me a long story.".into(),
        tokens: 48,
        ignore_eos: true,
        ..Default::default()
    };
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (mut c, req) = (c.clone(), short.clone());
        tasks.push(tokio::spawn(async move {
            c.predict(req).await.map(|r| r.into_inner().tokens)
        }));
    }
    for task in tasks {
        let tokens = tokio::time::timeout(Duration::from_secs(120), task).await???;
        assert_eq!(tokens, 48, "queued until the row before it finished");
    }
    let huge = pb::PredictOptions {
        tokens: 1000,
        ..short.clone()
    };
    let status = c.clone().predict(huge).await.expect_err("cannot fit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("kv_memory_mb"), "{status:?}");
    assert_eq!(c.clone().predict(short).await?.into_inner().tokens, 48);
    Ok(())
}

/// Mixtures of experts and sliding-window families: 8 concurrent streams each equal their own
/// output alone (a decode batch routes, gathers and attends each row as it would alone;
/// DeepSeek's latent attention row by row, packed experts through quant-cpu's gathered
/// kernel; each row's window over its own cache).
#[tokio::test]
async fn eight_concurrent_streams_on_mixtures_of_experts_equal_each_alone() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let c = server.client().await?;
    for model in [
        "tiny-qwen3-moe-4bit",
        "tiny-deepseek-v2",
        "tiny-deepseek-v3",
        "tiny-gemma3-text",
        "tiny-ministral3-8bit",
        "tiny-glm4-4bit",
        "smollm2-135m-nvfp4",
        "tiny-qwen3-next",
        "tiny-qwen3-5-moe-4bit",
    ] {
        streams_equal_each_alone(&c, model, (8, &[])).await?;
    }
    Ok(())
}

/// The default numerics, int8 (the test runner's variable cleared): a row's result does not
/// depend on its batch there either, also with more rows than a few-row product takes at
/// once (16).
#[tokio::test]
async fn eight_and_twenty_concurrent_streams_in_int8_equal_each_alone() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[("MLX_DISTRIBUTED_CPU_NUMERICS", "")]).await?;
    let c = server.client().await?;
    for model in [
        "smollm2-135m-4bit",
        "smollm2-135m-8bit",
        "tiny-qwen3-moe-4bit",
    ] {
        streams_equal_each_alone(&c, model, (8, &[])).await?;
    }
    streams_equal_each_alone(&c, "smollm2-135m-4bit", (20, &["max_batch:24"])).await
}

/// `model` loaded with `options` answers `streams` concurrent requests as it answers each
/// alone.
async fn streams_equal_each_alone(
    c: &BackendClient<Channel>,
    model: &str,
    (streams, options): (usize, &[&str]),
) -> TestResult {
    let loaded = load_fixture(&mut c.clone(), model, options).await?;
    assert!(loaded.success, "{model}: {loaded:?}");
    let requests: Vec<pb::PredictOptions> = (0..streams)
        .map(|i| pb::PredictOptions {
            prompt: format!("Story {i}:{}", " once upon a time".repeat(i + 1)),
            tokens: 20 + 2 * i as i32,
            ignore_eos: true,
            // The logprobs carry the logits' bits: a numerics change no text shows shows here.
            logprobs: 1,
            top_logprobs: 2,
            ..Default::default()
        })
        .collect();
    let text = |r: pb::Reply| (r.message, r.logprobs);
    let mut alone = Vec::new();
    for r in &requests {
        alone.push(text(c.clone().predict(r.clone()).await?.into_inner()));
    }
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|r| {
            let mut c = c.clone();
            tokio::spawn(async move { c.predict(r).await.map(|x| text(x.into_inner())) })
        })
        .collect();
    for (i, (task, want)) in tasks.into_iter().zip(&alone).enumerate() {
        assert_eq!(&task.await??, want, "{model}: stream {i}");
    }
    Ok(())
}
