//! Request builders and readers shared by the gRPC tests.

use backend::grpc::pb::{self, backend_client::BackendClient};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::goldens::GoldenCase;
use crate::{fixture, TestResult};

/// LoadModel of a fixture with `key:value` options.
pub async fn load_fixture(
    c: &mut BackendClient<Channel>,
    name: &str,
    options: &[&str],
) -> TestResult<pb::Result> {
    let req = pb::ModelOptions {
        model: fixture(name)?.to_string_lossy().into_owned(),
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    Ok(c.load_model(req).await?.into_inner())
}

/// Polls Status until it says READY, or fails once `limit` passes: a reply's last chunk
/// reaches the client while the engine still finishes its round (BUSY until then).
pub async fn ready_within(
    c: &mut BackendClient<Channel>,
    limit: std::time::Duration,
) -> TestResult {
    let until = std::time::Instant::now() + limit;
    loop {
        let status = c.status(pb::HealthMessage {}).await?.into_inner();
        if status.state == pb::status_response::State::Ready as i32 {
            return Ok(());
        }
        if std::time::Instant::now() >= until {
            return Err(format!("not READY within {limit:?}: {status:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A greedy request of one user message through the chat template, for `max_tokens`.
pub fn chat_request(content: &str, max_tokens: i32) -> pb::PredictOptions {
    pb::PredictOptions {
        use_tokenizer_template: true,
        messages: vec![pb::Message {
            role: "user".into(),
            content: content.into(),
            ..Default::default()
        }],
        tokens: max_tokens,
        temperature: 0.0,
        ..Default::default()
    }
}

/// A greedy request for a golden case, plain or through the chat template.
pub fn golden_request(case: &GoldenCase, max_tokens: usize) -> pb::PredictOptions {
    let mut req = pb::PredictOptions {
        tokens: max_tokens as i32,
        temperature: 0.0,
        ..Default::default()
    };
    if case.chat {
        req.use_tokenizer_template = true;
        req.messages = vec![pb::Message {
            role: "user".into(),
            content: case.prompt.clone(),
            ..Default::default()
        }];
    } else {
        req.prompt = case.prompt.clone();
    }
    req
}

/// The whole text of a PredictStream, and its last reply.
pub async fn stream_text(
    c: &mut BackendClient<Channel>,
    req: pb::PredictOptions,
) -> TestResult<(String, pb::Reply)> {
    let mut stream = c.predict_stream(req).await?.into_inner();
    let (mut text, mut last) = (Vec::new(), pb::Reply::default());
    while let Some(reply) = stream.next().await {
        let reply = reply?;
        text.extend_from_slice(&reply.message);
        last = reply;
    }
    Ok((String::from_utf8(text)?, last))
}

/// The error a stream ends in, within `limit` (replies before it are skipped); an error if it
/// ends cleanly or takes longer.
pub async fn stream_error(
    stream: &mut tonic::Streaming<pb::Reply>,
    limit: std::time::Duration,
) -> TestResult<tonic::Status> {
    let ended = tokio::time::timeout(limit, async {
        while let Some(reply) = stream.next().await {
            if let Err(status) = reply {
                return Ok(status);
            }
        }
        Err("the stream ended without an error")
    })
    .await
    .map_err(|_| format!("no error within {limit:?}"))?;
    Ok(ended?)
}

/// A client of the backend at `addr` (`host:port`), once it listens; an error after `limit`.
pub async fn connect_within(
    addr: &str,
    limit: std::time::Duration,
) -> TestResult<BackendClient<Channel>> {
    let start = std::time::Instant::now();
    loop {
        match Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await
        {
            Ok(ch) => return Ok(BackendClient::new(ch)),
            Err(e) if start.elapsed() > limit => {
                return Err(format!("{addr}: not listening after {limit:?}: {e}").into())
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}

/// Asserts that the backend answers the first case of the goldens `name` exactly.
pub async fn answers_first_golden(c: &mut BackendClient<Channel>, name: &str) -> TestResult {
    let g = crate::goldens::load(name)?;
    let reply = c
        .predict(golden_request(&g.cases[0], g.max_tokens))
        .await?
        .into_inner();
    assert_eq!(String::from_utf8(reply.message)?, g.cases[0].text);
    Ok(())
}
