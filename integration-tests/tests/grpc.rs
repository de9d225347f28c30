//! LocalAI's contract over real gRPC against the real binary and the 4-bit fixture.

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::goldens::{self, GoldenCase};
use integration_tests::rpc::{golden_request as request, load_fixture, stream_text};
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, TestResult};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

/// Our default CPU mode on the 4-bit fixture equals mlx-lm on its f32 dequantization.
const GOLDENS: &str = "smollm2-135m-4bit-f32";

async fn load(c: &mut BackendClient<Channel>, options: &[&str]) -> TestResult<pb::Result> {
    load_fixture(c, "smollm2-135m-4bit", options).await
}

#[tokio::test]
async fn every_rpc_in_one_lifecycle() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let g = goldens::load(GOLDENS)?;
    let case = g
        .cases
        .iter()
        .find(|c| c.name == "capital-chat")
        .ok_or("no capital-chat")?;

    assert_eq!(
        c.health(pb::HealthMessage {}).await?.into_inner().message,
        b"OK"
    );
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    assert_eq!(
        status.state,
        pb::status_response::State::Uninitialized as i32
    );
    let err = c.predict(request(case, 8)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    let bad = load(&mut c, &["top_p:7"]).await?;
    assert!(!bad.success && bad.message.contains("top_p"), "{bad:?}");
    let ok = load(&mut c, &["some_unknown_option:1"]).await?;
    assert!(ok.success, "{ok:?}");
    // LocalAI's mlx-distributed backend's words, which LocalAI's own tests expect.
    assert_eq!(ok.message, "Model loaded successfully");

    let reply = c.predict(request(case, g.max_tokens)).await?.into_inner();
    assert_eq!(String::from_utf8(reply.message.clone())?, case.text);
    assert_eq!(reply.chat_deltas[0].content, case.text);
    assert_eq!(reply.prompt_tokens as usize, case.prompt_ids.len());
    assert_eq!(reply.tokens as usize, case.tokens.len());
    assert!(reply.timing_prompt_processing > 0.0 && reply.timing_token_generation > 0.0);

    let tokens = c.tokenize_string(request(case, 1)).await?.into_inner();
    assert_eq!(
        tokens.tokens,
        case.prompt_ids
            .iter()
            .map(|&i| i as i32)
            .collect::<Vec<_>>()
    );
    assert_eq!(tokens.length as usize, case.prompt_ids.len());
    let ids: Vec<i32> = case.tokens.iter().map(|&i| i as i32).collect();
    let text = c
        .detokenize(pb::DetokenizeRequest { tokens: ids })
        .await?
        .into_inner()
        .content;
    assert_eq!(text, case.text);
    let err = c
        .detokenize(pb::DetokenizeRequest { tokens: vec![-1] })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);

    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    assert_eq!(status.state, pb::status_response::State::Ready as i32);
    let breakdown = status.memory.ok_or("no memory")?.breakdown;
    assert!(breakdown["mlx_active"] > 50_000_000);
    // The map holds numbers only: the model's name is a key, its weights' bytes the value.
    let model = breakdown
        .iter()
        .find(|(k, _)| k.starts_with("model ") && k.ends_with("smollm2-135m-4bit"));
    assert_eq!(
        model.map(|(_, v)| v),
        breakdown.get("weight_bytes"),
        "{breakdown:?}"
    );
    let metrics = c.get_metrics(pb::MetricsRequest {}).await?.into_inner();
    assert_eq!(metrics.tokens_generated as usize, case.tokens.len());
    assert!(metrics.tokens_per_second > 0.0);
    let meta = c
        .model_metadata(pb::ModelOptions::default())
        .await?
        .into_inner();
    assert!(meta.rendered_template.contains("im_start") && !meta.supports_thinking);

    // Logprobs: OpenAI-shaped JSON, one entry per token, with the asked alternatives.
    let mut req = request(case, 3);
    req.logprobs = 1;
    req.top_logprobs = 2;
    let reply = c.predict(req).await?.into_inner();
    let lp: serde_json::Value = serde_json::from_slice(&reply.logprobs)?;
    assert_eq!(lp["content"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        lp["content"][0]["top_logprobs"].as_array().map(Vec::len),
        Some(2)
    );

    let freed = c.free(pb::HealthMessage {}).await?.into_inner();
    assert!(freed.success);
    assert_eq!(
        c.predict(request(case, 4)).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    assert!(
        load(&mut c, &[]).await?.success,
        "a second LoadModel after Free"
    );
    let reply = c.predict(request(case, g.max_tokens)).await?.into_inner();
    assert_eq!(String::from_utf8(reply.message)?, case.text);
    Ok(())
}

#[tokio::test]
async fn stream_equals_golden_and_a_disconnect_frees_the_engine() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load(&mut c, &[]).await?.success);
    let g = goldens::load(GOLDENS)?;
    let case = g
        .cases
        .iter()
        .find(|c| c.name == "haiku-plain")
        .ok_or("no haiku-plain")?;

    let (text, last) = stream_text(&mut c, request(case, g.max_tokens)).await?;
    assert_eq!(text, case.text);
    assert_eq!(last.tokens as usize, case.tokens.len());
    assert_eq!(last.prompt_tokens as usize, case.prompt_ids.len());
    // Predict gives the same text as the stream, leading space and all.
    let reply = c.predict(request(case, g.max_tokens)).await?.into_inner();
    assert_eq!(String::from_utf8(reply.message)?, text);
    assert_eq!(reply.chat_deltas[0].content, text);

    // Leave a long generation after two messages; the next request must not wait for it.
    let mut long = request(case, 2000);
    long.ignore_eos = true;
    let mut stream = c.predict_stream(long).await?.into_inner();
    for _ in 0..2 {
        stream.next().await.ok_or("stream ended")??;
    }
    drop(stream);
    let started = std::time::Instant::now();
    let (text, _) = stream_text(&mut c, request(case, g.max_tokens)).await?;
    assert_eq!(text, case.text);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the abandoned request kept the engine busy"
    );
    Ok(())
}

#[tokio::test]
async fn eight_concurrent_streams_each_get_their_own_golden_text() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load(&mut c, &[]).await?.success);
    let g = goldens::load(GOLDENS)?;
    let cases: Vec<&GoldenCase> = g.cases.iter().cycle().take(8).collect();
    let tasks = cases.iter().map(|case| {
        let mut c = c.clone();
        let req = request(case, g.max_tokens);
        tokio::spawn(async move {
            stream_text(&mut c, req)
                .await
                .map(|(t, _)| t)
                .map_err(|e| e.to_string())
        })
    });
    let texts = futures_join(tasks.collect()).await;
    for (case, text) in cases.iter().zip(texts) {
        assert_eq!(text?, case.text, "{}", case.name);
    }
    Ok(())
}

async fn futures_join(
    tasks: Vec<tokio::task::JoinHandle<Result<String, String>>>,
) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.map_err(|e| e.to_string()).and_then(|r| r));
    }
    out
}

#[tokio::test]
async fn auth_token_is_required_when_set() -> TestResult {
    let server = BackendProcess::start(&[("LOCALAI_GRPC_AUTH_TOKEN", "s3cret")]).await?;
    let mut c = server.client().await?;
    let err = c.health(pb::HealthMessage {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(pb::HealthMessage {});
    req.metadata_mut()
        .insert("authorization", "Bearer wrong".parse()?);
    assert_eq!(
        c.health(req).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let mut req = tonic::Request::new(pb::HealthMessage {});
    req.metadata_mut()
        .insert("authorization", "Bearer s3cret".parse()?);
    assert_eq!(c.health(req).await?.into_inner().message, b"OK");
    Ok(())
}

#[tokio::test]
async fn identity_mismatch_and_bad_requests_get_clear_errors() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load(&mut c, &[]).await?.success);
    let g = goldens::load(GOLDENS)?;
    let case = &g.cases[0];

    let mut req = request(case, 4);
    req.model_identity = "some-other-model".into();
    let err = c.predict(req).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("model identity mismatch"), "{err:?}");

    let mut req = request(case, 4);
    req.model_identity = fixture("smollm2-135m-4bit")?.to_string_lossy().into_owned();
    c.predict(req).await?;

    for (mutate, needle) in [
        (
            Box::new(|r: &mut pb::PredictOptions| r.tokens = -5)
                as Box<dyn Fn(&mut pb::PredictOptions)>,
            "Tokens",
        ),
        (Box::new(|r: &mut pb::PredictOptions| r.top_p = 3.0), "TopP"),
        (
            Box::new(|r: &mut pb::PredictOptions| r.logit_bias = "{oops".into()),
            "LogitBias",
        ),
        (
            Box::new(|r: &mut pb::PredictOptions| r.logit_bias = r#"{"49152": 5}"#.into()),
            "not in the vocabulary",
        ),
        (
            Box::new(|r: &mut pb::PredictOptions| r.logit_bias = r#"{"999999999": 5}"#.into()),
            "not in the vocabulary",
        ),
        (
            Box::new(|r: &mut pb::PredictOptions| {
                r.use_tokenizer_template = true;
                r.prompt.clear();
                r.messages = vec![pb::Message {
                    role: "user".into(),
                    content: "x".into(),
                    ..Default::default()
                }];
                r.tools = "[not json".into();
            }),
            "Tools",
        ),
        (
            Box::new(|r: &mut pb::PredictOptions| r.prompt = "word ".repeat(9000)),
            "context",
        ),
    ] {
        let mut req = request(case, 4);
        mutate(&mut req);
        let err = c.predict(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{needle}: {err:?}");
        assert!(err.message().contains(needle), "{needle}: {err:?}");
    }
    // The server keeps serving after all of that.
    c.predict(request(case, 2)).await?;
    Ok(())
}

/// Resident memory of the backend, as Status reports it.
async fn resident(c: &mut BackendClient<Channel>) -> TestResult<u64> {
    let status = c.status(pb::HealthMessage {}).await?.into_inner();
    Ok(status.memory.ok_or("no memory in Status")?.total)
}

/// Free gives the memory back: resident memory ends within 64 MiB of where it was before
/// LoadModel, after a load in f32, generations, and a swap to the model as stored.
#[tokio::test]
async fn free_returns_resident_memory_to_where_it_was_before_load_model() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let g = goldens::load(GOLDENS)?;
    let case = g.cases.first().ok_or("no golden case")?;
    let before = resident(&mut c).await?;
    for options in [&["dequantize:true"][..], &[]] {
        assert!(load(&mut c, options).await?.success);
        c.predict(request(case, g.max_tokens)).await?;
        stream_text(&mut c, request(case, g.max_tokens)).await?;
    }
    let loaded = resident(&mut c).await?;
    assert!(c.free(pb::HealthMessage {}).await?.into_inner().success);
    let after = resident(&mut c).await?;
    let mib = |b: u64| b >> 20;
    eprintln!(
        "resident: {} MiB before LoadModel, {} MiB loaded, {} MiB after Free",
        mib(before),
        mib(loaded),
        mib(after)
    );
    assert!(
        after <= before + (64 << 20),
        "resident memory {} MiB before LoadModel, {} MiB loaded, {} MiB after Free",
        mib(before),
        mib(loaded),
        mib(after)
    );
    Ok(())
}

/// ModelOptions this backend cannot honour (yet, or with that value) fail LoadModel naming the
/// field, never load a model other than the one asked for; the same model then loads without
/// them.
#[tokio::test]
async fn model_options_not_supported_yet_fail_load_model_by_name() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let model = fixture("smollm2-135m-4bit")?.to_string_lossy().into_owned();
    let base = || pb::ModelOptions {
        model: model.clone(),
        ..Default::default()
    };
    let cases = [
        (
            pb::ModelOptions {
                lora_adapters: vec!["adapter".into()],
                ..base()
            },
            "LoRA adapter `adapter` is neither a folder nor",
        ),
        (
            pb::ModelOptions {
                cache_type_value: "iq4_nl".into(),
                ..base()
            },
            "CacheTypeValue: cache type \"iq4_nl\" is not one of",
        ),
        (
            pb::ModelOptions {
                mm_proj: "proj.gguf".into(),
                ..base()
            },
            "MMProj",
        ),
    ];
    for (options, field) in cases {
        let reply = c.load_model(options).await?.into_inner();
        assert!(
            !reply.success && reply.message.contains(field),
            "{field}: {reply:?}"
        );
    }
    assert!(c.load_model(base()).await?.into_inner().success);
    Ok(())
}
