//! Absurd requests over real gRPC each get a clear status (or, where the value is legal, a
//! clamped answer), and the server keeps serving: huge Tokens, negative and non-finite
//! numbers, a 10 MB prompt, invalid UTF-8 on the wire, unknown models and path traversal.

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::goldens;
use integration_tests::rpc::{golden_request, load_fixture};
use integration_tests::server::BackendProcess;
use integration_tests::TestResult;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::transport::Channel;
use tonic::{Code, Status};

const MODEL: &str = "smollm2-135m-4bit";
const GOLDENS: &str = "smollm2-135m-4bit-f32";

/// Raw bytes as a gRPC message, to put what no well-behaved client would on the wire.
#[derive(Default, Clone)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// Predict with `Prompt` (field 1) set to bytes that are not UTF-8.
async fn predict_invalid_utf8(addr: &str) -> TestResult<Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    let prompt = [0xff, 0xfe, b'h', b'i', 0xc3];
    let mut message = vec![0x0a, prompt.len() as u8];
    message.extend_from_slice(&prompt);
    let path = http::uri::PathAndQuery::from_static("/backend.Backend/Predict");
    let err = grpc
        .unary::<Vec<u8>, Vec<u8>, _>(tonic::Request::new(message), path, RawCodec)
        .await
        .expect_err("invalid UTF-8 must be refused");
    Ok(err)
}

fn request(prompt: &str) -> pb::PredictOptions {
    pb::PredictOptions {
        prompt: prompt.into(),
        tokens: 4,
        ..Default::default()
    }
}

async fn refused(
    c: &mut BackendClient<Channel>,
    req: pb::PredictOptions,
    code: Code,
    needle: &str,
) -> TestResult {
    let err = c.predict(req).await.expect_err(needle);
    assert_eq!(err.code(), code, "{needle}: {err:?}");
    assert!(err.message().contains(needle), "{needle}: {err:?}");
    Ok(())
}

#[tokio::test]
async fn absurd_requests_get_clear_statuses_and_the_server_keeps_serving() -> TestResult {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    let bad = Code::InvalidArgument;
    let with = |f: &dyn Fn(&mut pb::PredictOptions)| {
        let mut r = request("Hello");
        f(&mut r);
        r
    };
    refused(&mut c, with(&|r| r.top_k = -1), bad, "TopK").await?;
    refused(&mut c, with(&|r| r.temperature = -1.0), bad, "Temperature").await?;
    refused(
        &mut c,
        with(&|r| r.temperature = f32::NAN),
        bad,
        "Temperature",
    )
    .await?;
    refused(&mut c, with(&|r| r.min_p = -0.5), bad, "MinP").await?;
    refused(&mut c, with(&|r| r.penalty = f32::INFINITY), bad, "Penalty").await?;
    refused(&mut c, with(&|r| r.top_logprobs = 21), bad, "TopLogprobs").await?;
    refused(&mut c, with(&|r| r.tokens = i32::MIN), bad, "Tokens").await?;
    let huge = "word ".repeat(2 << 20);
    refused(&mut c, request(&huge), bad, "context").await?;

    let err = predict_invalid_utf8(&server.addr).await?;
    assert_ne!(err.code(), Code::Ok);
    assert!(err.message().to_lowercase().contains("utf-8"), "{err:?}");

    // Tokens = 2^31-1 is legal: it is capped at the context, and eos still ends the answer.
    let g = goldens::load(GOLDENS)?;
    let case = g
        .cases
        .iter()
        .find(|c| c.tokens.len() < g.max_tokens)
        .ok_or("a golden case that ends with eos")?;
    let mut req = golden_request(case, g.max_tokens);
    req.tokens = i32::MAX;
    let reply = tokio::time::timeout(Duration::from_secs(120), c.predict(req)).await??;
    assert_eq!(reply.into_inner().tokens as usize, case.tokens.len());

    for (model, model_path, needle) in [
        ("/no/such/model", "", "/no/such/model"),
        ("../../etc", "/tmp", "may not leave the model path"),
        ("a/b/c/d", "", "neither a folder nor a Hugging Face repo id"),
        ("", "", "ModelOptions.Model is empty"),
    ] {
        let r = c
            .load_model(pb::ModelOptions {
                model: model.into(),
                model_path: model_path.into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert!(!r.success && r.message.contains(needle), "{model}: {r:?}");
    }
    // A failed load leaves no model; loading again serves.
    assert!(load_fixture(&mut c, MODEL, &[]).await?.success);
    assert_eq!(c.predict(request("Hello")).await?.into_inner().tokens, 4);
    Ok(())
}

/// LoadModel with `Model`, `ModelPath` and `options`; the reply.
async fn load(
    c: &mut BackendClient<Channel>,
    model: &str,
    model_path: &std::path::Path,
    options: &[&str],
) -> TestResult<pb::Result> {
    let req = pb::ModelOptions {
        model: model.into(),
        model_path: model_path.to_string_lossy().into_owned(),
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    Ok(c.load_model(req).await?.into_inner())
}

#[cfg(unix)]
#[tokio::test]
async fn a_model_may_not_leave_the_model_path() -> TestResult {
    let fixture = integration_tests::fixture(MODEL)?;
    let dir = std::env::temp_dir().join(format!("mlxd-escape-{}", std::process::id()));
    let models = dir.join("models");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&models)?;
    std::os::unix::fs::symlink(&fixture, models.join("linked"))?;
    // `../../../<fixture>`: up from the models folder to `/`, then down to the fixture.
    let ups = models.components().count() - 1;
    let escape = format!(
        "{}{}",
        "../".repeat(ups),
        fixture.strip_prefix("/")?.display()
    );
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    for model in [escape.as_str(), "linked"] {
        let r = load(&mut c, model, &models, &[]).await?;
        assert!(
            !r.success && r.message.contains("may not leave the model path"),
            "{model}: {r:?}"
        );
    }
    // `tests` is a folder relative to the backend's working directory, not under ModelPath.
    let r = load(&mut c, "tests", &models, &[]).await?;
    assert!(
        !r.success && r.message.contains("neither a folder nor"),
        "{r:?}"
    );
    let allow = ["allow_paths_outside_model_path:true"];
    let r = load(&mut c, "linked", &models, &allow).await?;
    assert!(r.success, "{r:?}");
    assert_eq!(c.predict(request("Hello")).await?.into_inner().tokens, 4);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
