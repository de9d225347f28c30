//! Speculative decoding over real gRPC with SmolLM2: prompt lookup (`speculative:ngram`) on the
//! 4-bit model, and the 4-bit model as the draft of the 8-bit one (`DraftModel`). Greedy text
//! equals mlx-lm's goldens and plain decoding, alone, batched and on a 2-rank pipeline, while
//! proposals are taken; seeded sampling reproduces; a request, option or draft the model
//! cannot honour is refused by name.

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::Cluster;
use integration_tests::cluster::TempDir;
use integration_tests::goldens::{self, GoldenCase};
use integration_tests::rpc::{chat_request, golden_request, load_fixture, stream_text};
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, TestResult};
use serde_json::Value;
use tonic::transport::Channel;
use tonic::Code;

const MODEL: &str = "smollm2-135m-4bit";
/// mlx-lm's greedy texts for MODEL: those of its f32 twin, which our CPU numerics equal.
const GOLDENS: &str = "smollm2-135m-4bit-f32";
const NGRAM: &[&str] = &["speculative:ngram", "num_draft_tokens:4"];

/// The draft-model case: the 8-bit model, drafted for by the 4-bit one.
const TARGET: &str = "smollm2-135m-8bit";
const TARGET_GOLDENS: &str = "smollm2-135m-8bit-f32";
const DRAFT: &str = "smollm2-135m-4bit";

/// One server or cluster at a time (an async lock, held across awaits).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A task grounded in its input: most of the answer is in the prompt.
const GROUNDED: &str = "Repeat this Python code exactly, but rename the function `add` to \
                        `add_numbers`:\n\n```python\ndef add(a, b):\n    \"\"\"Return the sum of \
                        a and b.\"\"\"\n    return a + b\n\n\nprint(add(2, 3))\nprint(add(10, 20))\n```";

fn chat(content: &str, max_tokens: usize) -> pb::PredictOptions {
    chat_request(content, max_tokens as i32)
}

/// The golden chat cases and the grounded task, as greedy requests.
fn requests(goldens: &str) -> TestResult<(Vec<pb::PredictOptions>, Vec<GoldenCase>)> {
    let g = goldens::load(goldens)?;
    let cases: Vec<GoldenCase> = g.cases.into_iter().filter(|c| c.chat).take(3).collect();
    let mut reqs: Vec<_> = cases
        .iter()
        .map(|c| golden_request(c, g.max_tokens))
        .collect();
    reqs.push(chat(GROUNDED, 96));
    Ok((reqs, cases))
}

async fn load(c: &mut BackendClient<Channel>, options: &[&str]) -> TestResult {
    let reply = load_fixture(c, MODEL, options).await?;
    assert!(reply.success, "{reply:?}");
    Ok(())
}

/// LoadModel of the 8-bit model with `draft` (a folder) as its DraftModel.
async fn load_with_draft(c: &mut BackendClient<Channel>, draft: &str) -> TestResult<pb::Result> {
    let req = pb::ModelOptions {
        model: fixture(TARGET)?.to_string_lossy().into_owned(),
        draft_model: draft.into(),
        options: vec!["num_draft_tokens:4".into()],
        ..Default::default()
    };
    Ok(c.load_model(req).await?.into_inner())
}

async fn alone(c: &BackendClient<Channel>, reqs: &[pb::PredictOptions]) -> TestResult<Vec<String>> {
    let mut texts = Vec::new();
    for req in reqs {
        texts.push(stream_text(&mut c.clone(), req.clone()).await?.0);
    }
    Ok(texts)
}

/// Every request at once, as rows of one batch.
async fn batched(
    c: &BackendClient<Channel>,
    reqs: &[pb::PredictOptions],
) -> TestResult<Vec<String>> {
    let tasks: Vec<_> = reqs
        .iter()
        .map(|req| {
            let (mut c, req) = (c.clone(), req.clone());
            tokio::spawn(async move { stream_text(&mut c, req).await.map_err(|e| e.to_string()) })
        })
        .collect();
    let mut texts = Vec::new();
    for task in tasks {
        texts.push(
            tokio::time::timeout(Duration::from_secs(300), task)
                .await???
                .0,
        );
    }
    Ok(texts)
}

/// GetMetrics' speculation counters: (proposals verified, proposals taken).
async fn speculation(c: &mut BackendClient<Channel>) -> TestResult<(u64, u64)> {
    let metrics = c.get_metrics(pb::MetricsRequest {}).await?.into_inner();
    let parsed: Value = serde_json::from_str(&metrics.prompt_json_for_slot)?;
    let n = |k: &str| parsed["speculation"][k].as_u64().unwrap_or(0);
    Ok((n("drafted"), n("accepted")))
}

/// The plain greedy texts of `model`, from one node without speculation; those of the golden
/// `cases` must be mlx-lm's.
async fn plain_texts(
    model: &str,
    reqs: &[pb::PredictOptions],
    cases: &[GoldenCase],
) -> TestResult<Vec<String>> {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let reply = load_fixture(&mut c, model, &[]).await?;
    assert!(reply.success, "{reply:?}");
    let texts = alone(&c, reqs).await?;
    for (case, text) in cases.iter().zip(&texts) {
        assert_eq!(
            text, &case.text,
            "case {}: plain decoding against mlx-lm",
            case.name
        );
    }
    Ok(texts)
}

#[tokio::test]
async fn ngram_greedy_equals_plain_decoding_alone_batched_and_on_a_pipeline() -> TestResult {
    let _serial = SERIAL.lock().await;
    let (reqs, cases) = requests(GOLDENS)?;
    let plain = plain_texts(MODEL, &reqs, &cases).await?;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    load(&mut c, NGRAM).await?;
    assert_eq!(alone(&c, &reqs).await?, plain, "alone");
    let (drafted, accepted) = speculation(&mut c).await?;
    println!("alone: {accepted} of {drafted} proposals taken");
    assert!(accepted > 20, "{accepted} of {drafted} proposals taken");
    assert_eq!(batched(&c, &reqs).await?, plain, "batched");
    drop(server);
    let cluster = Cluster::start(2, "spec-ngram-pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let c = rank0.client().await?;
    load(&mut c.clone(), NGRAM).await?;
    assert_eq!(batched(&c, &reqs).await?, plain, "2-rank pipeline");
    Ok(())
}

/// In the default numerics, int8 (the test runner's variable cleared), n-gram speculation
/// keeps plain decoding's text alone and batched: a verify step's rows take the same integer
/// products as a one-row step, whatever rows share the call.
#[tokio::test]
async fn ngram_greedy_equals_plain_decoding_in_int8() -> TestResult {
    let _serial = SERIAL.lock().await;
    let (reqs, _) = requests(GOLDENS)?;
    let server = BackendProcess::start(&[("MLX_DISTRIBUTED_CPU_NUMERICS", "")]).await?;
    let mut c = server.client().await?;
    load(&mut c, &[]).await?;
    let plain = alone(&c, &reqs).await?;
    load(&mut c, NGRAM).await?;
    assert_eq!(alone(&c, &reqs).await?, plain, "alone");
    let (drafted, accepted) = speculation(&mut c).await?;
    assert!(accepted > 20, "{accepted} of {drafted} proposals taken");
    assert_eq!(batched(&c, &reqs).await?, plain, "batched");
    Ok(())
}

/// The 4-bit model drafts for the 8-bit one: the 8-bit model's greedy text, alone, batched and
/// on a 2-rank pipeline (the draft runs on rank 0 only).
#[tokio::test]
async fn a_draft_model_keeps_the_greedy_text_on_one_node_and_a_pipeline() -> TestResult {
    let _serial = SERIAL.lock().await;
    let (reqs, cases) = requests(TARGET_GOLDENS)?;
    let plain = plain_texts(TARGET, &reqs, &cases).await?;
    let draft = fixture(DRAFT)?.to_string_lossy().into_owned();
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let reply = load_with_draft(&mut c, &draft).await?;
    assert!(reply.success, "{reply:?}");
    assert_eq!(alone(&c, &reqs).await?, plain, "alone");
    let (drafted, accepted) = speculation(&mut c).await?;
    println!("draft model, alone: {accepted} of {drafted} proposals taken");
    assert!(
        2 * accepted > drafted,
        "{accepted} of {drafted} proposals taken"
    );
    assert_eq!(batched(&c, &reqs).await?, plain, "batched");
    drop(server);
    let cluster = Cluster::start(2, "spec-draft-pp2")?;
    let rank0 = cluster.rank0(&[]).await?;
    let mut c = rank0.client().await?;
    let reply = load_with_draft(&mut c, &draft).await?;
    assert!(reply.success, "{reply:?}");
    assert_eq!(batched(&c, &reqs).await?, plain, "2-rank pipeline");
    Ok(())
}

/// A draft that tokenizes differently (one token's id moved) or is missing is refused at
/// LoadModel, naming DraftModel, and the model being served keeps serving.
#[tokio::test]
async fn a_draft_with_another_tokenizer_is_refused() -> TestResult {
    let _serial = SERIAL.lock().await;
    let dir = TempDir::new("spec-other-tokenizer")?;
    let source = fixture(DRAFT)?;
    for entry in std::fs::read_dir(&source)? {
        let path = entry?.path();
        let name = path.file_name().ok_or("a file name")?;
        if name != "tokenizer.json" {
            std::os::unix::fs::symlink(&path, dir.0.join(name))?;
        }
    }
    let mut tokenizer: Value =
        serde_json::from_slice(&std::fs::read(source.join("tokenizer.json"))?)?;
    let vocab = tokenizer["model"]["vocab"]
        .as_object_mut()
        .ok_or("a vocab")?;
    let (a, b) = (vocab["hello"].clone(), vocab["world"].clone());
    vocab.insert("hello".into(), b);
    vocab.insert("world".into(), a);
    std::fs::write(
        dir.0.join("tokenizer.json"),
        serde_json::to_vec(&tokenizer)?,
    )?;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let reply = load_with_draft(&mut c, &fixture(DRAFT)?.to_string_lossy()).await?;
    assert!(reply.success, "{reply:?}");
    let reply = load_with_draft(&mut c, &dir.0.to_string_lossy()).await?;
    assert!(!reply.success, "{reply:?}");
    assert!(
        reply.message.contains("DraftModel") && reply.message.contains("tokenizer differs"),
        "{reply:?}"
    );
    let reply = load_with_draft(&mut c, "/nonexistent/draft").await?;
    assert!(
        !reply.success && reply.message.contains("DraftModel"),
        "{reply:?}"
    );
    let (text, _) = stream_text(&mut c.clone(), chat("Hi", 4)).await?;
    assert!(!text.is_empty(), "the loaded model keeps serving");
    Ok(())
}

/// The same seed gives the same text with proposals, alone or beside other rows.
#[tokio::test]
async fn seeded_sampling_with_proposals_reproduces() -> TestResult {
    let _serial = SERIAL.lock().await;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    load(&mut c, NGRAM).await?;
    let sampled = |seed: i32| pb::PredictOptions {
        temperature: 0.8,
        seed,
        ..chat(GROUNDED, 64)
    };
    let first = stream_text(&mut c.clone(), sampled(7)).await?.0;
    let again = stream_text(&mut c.clone(), sampled(7)).await?.0;
    assert_eq!(first, again);
    let beside = batched(&c, &[sampled(7), sampled(8), chat(GROUNDED, 32)]).await?;
    assert_eq!(beside[0], first, "beside other rows");
    assert_ne!(beside[1], first, "another seed");
    let (_, accepted) = speculation(&mut c).await?;
    assert!(accepted > 0);
    Ok(())
}

/// Proposals asked of a model that makes none, too many of them, or an unknown drafting:
/// each refused, naming the field or option.
#[tokio::test]
async fn what_cannot_be_honoured_is_refused_by_name() -> TestResult {
    let _serial = SERIAL.lock().await;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let reply = load_fixture(&mut c, MODEL, &["speculative:eagle"]).await?;
    assert!(
        !reply.success && reply.message.contains("speculative"),
        "{reply:?}"
    );
    let reply = load_fixture(&mut c, MODEL, &["num_draft_tokens:99"]).await?;
    assert!(
        !reply.success && reply.message.contains("num_draft_tokens"),
        "{reply:?}"
    );
    load(&mut c, &[]).await?;
    let asks = pb::PredictOptions {
        n_draft: 3,
        ..chat("Hi", 4)
    };
    let status = c
        .predict(asks)
        .await
        .err()
        .ok_or("NDraft without drafting was served")?;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("NDraft"), "{status:?}");
    load(&mut c, NGRAM).await?;
    let too_many = pb::PredictOptions {
        n_draft: 99,
        ..chat("Hi", 4)
    };
    let status = c
        .predict(too_many)
        .await
        .err()
        .ok_or("NDraft 99 was served")?;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("NDraft"), "{status:?}");
    Ok(())
}

/// A model with linear-attention layers refuses speculation at load, naming it: a rejected
/// proposal cannot be taken back from a recurrent state. The model loads without it.
#[tokio::test]
async fn speculation_on_linear_attention_is_refused_by_name() -> TestResult {
    let _serial = SERIAL.lock().await;
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let reply = load_fixture(&mut c, "tiny-qwen3-next", &["speculative:ngram"]).await?;
    assert!(!reply.success, "{reply:?}");
    assert!(
        reply
            .message
            .contains("speculative decoding is not supported"),
        "{reply:?}"
    );
    let reply = load_fixture(&mut c, "tiny-qwen3-next", &[]).await?;
    assert!(reply.success, "{reply:?}");
    Ok(())
}
