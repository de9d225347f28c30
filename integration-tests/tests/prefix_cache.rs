//! The prefix cache over real gRPC: a request that shares a 1,000-token prefix with an earlier
//! one reuses its KV (a counter shows the hit) and answers exactly as it would without the
//! cache, on one node, on a 2-rank pipeline and in 2-rank tensor mode. A partly matching
//! cached state never leaks its tail into another request (vllm-mlx #384/#775).

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::prompts::shared_prefix;
use integration_tests::rpc::load_fixture;
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use serde_json::Value;
use tonic::transport::Channel;

const MODEL: &str = "smollm2-135m-4bit";

/// One cluster or server at a time: each runs several processes on a 2-core box.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The prompts: two full questions after the whole prefix, and one that shares only half of
/// it (its cached match is trimmed) with a secret the others must never see.
fn prompts() -> Vec<String> {
    let prefix = shared_prefix();
    let half = &prefix[..prefix.len() / 2];
    vec![
        format!("{prefix}Question: when does the red door open?\nAnswer:"),
        format!("{prefix}Question: what is fact 41 about?\nAnswer:"),
        format!("{half}The password is SWORDFISH. Repeat the password:"),
        format!("{half}Question: when does the blue lamp open?\nAnswer:"),
    ]
}

fn greedy(prompt: &str) -> pb::PredictOptions {
    pb::PredictOptions {
        prompt: prompt.into(),
        tokens: 24,
        temperature: 0.0,
        ignore_eos: true,
        ..Default::default()
    }
}

async fn answer(c: &mut BackendClient<Channel>, prompt: &str) -> TestResult<String> {
    let reply = c.predict(greedy(prompt)).await?.into_inner();
    assert_eq!(reply.tokens, 24);
    Ok(String::from_utf8(reply.message)?)
}

/// GetMetrics' prefix-cache counters.
async fn cache_stats(c: &mut BackendClient<Channel>) -> TestResult<Value> {
    let m = c.get_metrics(pb::MetricsRequest {}).await?.into_inner();
    let json: Value = serde_json::from_str(&m.prompt_json_for_slot)?;
    Ok(json["prefix_cache"].clone())
}

/// Answers without the cache, then with it: in order (the second hits the first's 1,000
/// tokens, the third a trimmed match), again all at once, and once more in order. Every
/// answer equals its uncached one.
async fn hits_equal_misses(
    c: &mut BackendClient<Channel>,
    model: &str,
    extra: &[&str],
) -> TestResult {
    let off: Vec<&str> = [extra, &["max_cache_entries:0"]].concat();
    let loaded = load_fixture(c, model, &off).await?;
    assert!(loaded.success, "{loaded:?}");
    let prompts = prompts();
    let mut expected = Vec::new();
    for p in &prompts {
        expected.push(answer(c, p).await?);
    }
    assert_eq!(cache_stats(c).await?["hits"], 0);

    let loaded = load_fixture(c, model, extra).await?;
    assert!(loaded.success, "{loaded:?}");
    for (p, want) in prompts.iter().zip(&expected) {
        assert_eq!(&answer(c, p).await?, want, "in order, cached: {p:.40}");
    }
    let stats = cache_stats(c).await?;
    assert!(stats["hits"].as_u64() >= Some(2), "{stats}");
    assert!(stats["reused_tokens"].as_u64() >= Some(1000), "{stats}");
    let mut tasks = Vec::new();
    for p in prompts.iter().rev() {
        let (mut c, p) = (c.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            answer(&mut c, &p).await.map_err(|e| e.to_string())
        }));
    }
    for (task, want) in tasks.into_iter().zip(expected.iter().rev()) {
        assert_eq!(&task.await??, want, "concurrent, cached");
    }
    for (p, want) in prompts.iter().zip(&expected) {
        let got = answer(c, p).await?;
        assert_eq!(&got, want, "again: {p:.40}");
        if !p.contains("SWORDFISH") {
            assert!(!got.contains("SWORDFISH"), "the secret leaked: {got}");
        }
    }
    Ok(())
}

fn bounded<F: std::future::Future<Output = TestResult>>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(400), f)
}

#[tokio::test]
async fn a_shared_prefix_is_reused_and_answers_as_without_the_cache_on_one_node() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    bounded(hits_equal_misses(&mut c, MODEL, &[])).await??;
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    let memory = status.memory.ok_or("no memory in Status")?;
    assert!(memory.breakdown["prefix_cache_hits"] >= 2, "{memory:?}");
    assert!(memory.breakdown["prefix_cache_bytes"] > 0, "{memory:?}");
    Ok(())
}

/// The integer path (the CPU default): a hit's remainder runs as a few rows where the miss
/// ran the whole prompt at once, and the answers are the same.
#[tokio::test]
async fn a_shared_prefix_is_reused_and_answers_as_without_the_cache_in_int8() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[("MLX_DISTRIBUTED_CPU_NUMERICS", "")]).await?;
    let mut c = server.client().await?;
    bounded(hits_equal_misses(&mut c, MODEL, &[])).await??;
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    let memory = status.memory.ok_or("no memory in Status")?;
    assert_eq!(memory.breakdown["cpu_numerics_int8"], 1, "{memory:?}");
    Ok(())
}

#[tokio::test]
async fn a_shared_prefix_is_reused_on_a_two_rank_pipeline() -> TestResult {
    let _serial = serial();
    let cluster = Cluster::start(2, "prefix-pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    bounded(hits_equal_misses(&mut c, MODEL, &[])).await?
}

#[tokio::test]
async fn a_shared_prefix_is_reused_in_two_rank_tensor_mode() -> TestResult {
    let _serial = serial();
    let cluster = Cluster::start(2, "prefix-tp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    bounded(hits_equal_misses(
        &mut c,
        "tiny-qwen2",
        &["parallelism:tensor"],
    ))
    .await?
}

/// Mixtures of experts reuse a shared prefix the same way: DeepSeek-V3's cache holds the
/// latent and the rope keys (not keys and values), DeepSeek-V3.2's the indexer's keys beside
/// them (a prompt past its 12 picked keys), Qwen3-MoE's experts stay packed.
#[tokio::test]
async fn a_shared_prefix_is_reused_by_mixtures_of_experts() -> TestResult {
    let _serial = serial();
    let server = integration_tests::server::BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    for model in [
        "tiny-deepseek-v3",
        "tiny-deepseek-v32",
        "tiny-qwen3-moe-4bit",
    ] {
        bounded(hits_equal_misses(&mut c, model, &[])).await??;
    }
    Ok(())
}

/// Sliding-window families (a window of 8) reuse a prefix only where every window layer still
/// holds the positions the rest of the prompt sees, and then answer exactly as uncached: on
/// one node, over a two-rank pipeline (rank 0 decides from the whole model's windows) and in
/// tensor mode.
#[tokio::test]
async fn a_shared_prefix_is_reused_exactly_by_sliding_window_models() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    bounded(hits_equal_misses(&mut c, "tiny-gemma3-text", &[])).await??;
    drop(server);
    let cluster = Cluster::start(2, "prefix-window")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    bounded(hits_equal_misses(&mut c, "tiny-gemma3-text", &[])).await??;
    let tensor = ["parallelism:tensor"];
    bounded(hits_equal_misses(&mut c, "tiny-gemma3-text", &tensor)).await?
}

/// Linear attention (Qwen3-Next, Qwen3.5): an entry's recurrent states resume only at a
/// checkpoint (every 256 positions) or an entry's end within the shared prefix, and then answer
/// exactly as uncached: on one node and over a two-rank pipeline (the states stay on the rank
/// that holds their layers).
#[tokio::test]
async fn a_shared_prefix_is_reused_at_checkpoints_by_linear_attention() -> TestResult {
    let _serial = serial();
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    for model in ["tiny-qwen3-next", "tiny-qwen3-5-moe-4bit"] {
        bounded(hits_equal_misses(&mut c, model, &[])).await??;
        let reused = cache_stats(&mut c).await?["reused_tokens"].as_u64();
        assert!(reused.is_some_and(|r| r > 0), "{model}: nothing reused");
    }
    bounded(eight_streams_equal_each_alone(&c, "tiny-qwen3-5")).await??;
    drop(server);
    let cluster = Cluster::start(2, "prefix-linear")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    bounded(hits_equal_misses(&mut c, "tiny-qwen3-next", &[])).await?
}

/// 8 concurrent streams that share the long prefix (each resuming from a checkpoint of an
/// earlier one's entry) each equal their own run without the cache.
async fn eight_streams_equal_each_alone(c: &BackendClient<Channel>, model: &str) -> TestResult {
    let prefix = shared_prefix();
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("{prefix}Question {i}: what is fact {}?\nAnswer:", 7 * i))
        .collect();
    let loaded = load_fixture(&mut c.clone(), model, &["max_cache_entries:0"]).await?;
    assert!(loaded.success, "{loaded:?}");
    let mut alone = Vec::new();
    for p in &prompts {
        alone.push(answer(&mut c.clone(), p).await?);
    }
    let loaded = load_fixture(&mut c.clone(), model, &[]).await?;
    assert!(loaded.success, "{loaded:?}");
    answer(&mut c.clone(), &prompts[0]).await?;
    let tasks: Vec<_> = (prompts.into_iter())
        .map(|p| {
            let mut c = c.clone();
            tokio::spawn(async move { answer(&mut c, &p).await.map_err(|e| e.to_string()) })
        })
        .collect();
    for (i, (task, want)) in tasks.into_iter().zip(&alone).enumerate() {
        assert_eq!(&task.await??, want, "{model}: stream {i}");
    }
    let stats = cache_stats(&mut c.clone()).await?;
    assert!(stats["hits"].as_u64() >= Some(8), "{stats}");
    Ok(())
}
